/* Out-of-line copies of DPDK's static inline fast-path functions: see shim.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <rte_log.h>
#include "shim.h"

uint16_t fp_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t fp_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *fp_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }
int fp_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}
void fp_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
char *fp_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *fp_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *fp_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int fp_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
uint16_t fp_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t fp_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
uint32_t fp_mbuf_rss_hash(const struct rte_mbuf *m) { return m->hash.rss; }
int fp_mbuf_has_rss_hash(const struct rte_mbuf *m) { return (m->ol_flags & RTE_MBUF_F_RX_RSS_HASH) != 0; }
void fp_mbuf_refcnt_update(struct rte_mbuf *m, int16_t v) { rte_mbuf_refcnt_update(m, v); }
void fp_mempool_put_bulk(struct rte_mempool *mp, void *const *objs, unsigned n) { rte_mempool_put_bulk(mp, objs, n); }
void fp_mempool_put_bulk_uncached(struct rte_mempool *mp, void *const *objs, unsigned n)
{
	rte_mempool_generic_put(mp, objs, n, NULL);
}
unsigned fp_mempool_avail_count(const struct rte_mempool *mp) { return rte_mempool_avail_count(mp); }
unsigned fp_mempool_in_use_count(const struct rte_mempool *mp) { return rte_mempool_in_use_count(mp); }

unsigned fp_ring_enqueue_burst(struct rte_ring *r, void *const *objs, unsigned n, unsigned *free_space)
{
	return rte_ring_enqueue_burst(r, objs, n, free_space);
}
unsigned fp_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned n, unsigned *available)
{
	return rte_ring_dequeue_burst(r, objs, n, available);
}
unsigned fp_ring_count(const struct rte_ring *r) { return rte_ring_count(r); }
unsigned fp_ring_free_count(const struct rte_ring *r) { return rte_ring_free_count(r); }

unsigned fp_lcore_id(void) { return rte_lcore_id(); }
int fp_errno(void) { return rte_errno; }
uint64_t fp_rdtsc(void) { return rte_rdtsc(); }
void fp_pause(void) { rte_pause(); }
const char *fp_version(void) { return rte_version(); }
int fp_af_packet_rxq_sockfd(uint16_t port, uint16_t queue)
{
	if (port >= RTE_MAX_ETHPORTS || rte_eth_fp_ops[port].rxq.data == NULL)
		return -1;
	const int *q = rte_eth_fp_ops[port].rxq.data[queue];
	return q == NULL ? -1 : *q;
}
uint64_t fp_rss_hf_ip_udp_tcp(void) { return RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP; }
uint64_t fp_rx_offload_ipv4_cksum(void) { return RTE_ETH_RX_OFFLOAD_IPV4_CKSUM; }
uint64_t fp_rx_offload_udp_cksum(void) { return RTE_ETH_RX_OFFLOAD_UDP_CKSUM; }
uint32_t fp_softrss(uint32_t *input_tuple, uint32_t input_len, const uint8_t *rss_key)
{
	return rte_softrss(input_tuple, input_len, rss_key);
}

/* `set` = the `n` CPUs of `cpus`: 0, or EINVAL if one is out of range or there are none. */
static int fp_cpu_set(cpu_set_t *set, const uint32_t *cpus, uint32_t n)
{
    CPU_ZERO(set);
    for (uint32_t i = 0; i < n; i++) {
        if (cpus[i] >= CPU_SETSIZE)
            return EINVAL;
        CPU_SET(cpus[i], set);
    }
    return CPU_COUNT(set) == 0 ? EINVAL : 0;
}

int fp_pin_thread(int tid, const uint32_t *cpus, uint32_t n)
{
    cpu_set_t set;
    int rc = fp_cpu_set(&set, cpus, n);
    if (rc != 0)
        return rc;
    return sched_setaffinity((pid_t)tid, sizeof(set), &set) == 0 ? 0 : errno;
}

int fp_pin_current_thread(const uint32_t *cpus, uint32_t n)
{
    cpu_set_t set;
    int rc = fp_cpu_set(&set, cpus, n);
    if (rc != 0)
        return rc;
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static fp_log_cb fp_log_sink;

static ssize_t fp_log_write(void *cookie, const char *buf, size_t len)
{
	(void)cookie;
	int level = rte_log_cur_msg_loglevel();
	if (fp_log_sink != NULL && len > 0)
		fp_log_sink(level > 0 ? (uint32_t)level : RTE_LOG_INFO, buf, len);
	return (ssize_t)len;
}

int fp_log_to(fp_log_cb cb, uint32_t global_level)
{
	cookie_io_functions_t io = { .read = NULL, .write = fp_log_write, .seek = NULL, .close = NULL };
	FILE *f = fopencookie(NULL, "w", io);
	if (f == NULL)
		return -1;
	/* Unbuffered: each message, written by one vfprintf and flushed, arrives in one write. */
	setvbuf(f, NULL, _IONBF, 0);
	fp_log_sink = cb;
	rte_openlog_stream(f);
	rte_log_set_global_level(global_level);
	return 0;
}

int fp_ipv4_frag_pkt_is_fragmented(const struct rte_ipv4_hdr *hdr) { return rte_ipv4_frag_pkt_is_fragmented(hdr); }
struct rte_ipv6_fragment_ext *fp_ipv6_frag_get_ipv6_fragment_header(struct rte_ipv6_hdr *hdr)
{
	return rte_ipv6_frag_get_ipv6_fragment_header(hdr);
}
void fp_mbuf_set_l2_l3_len(struct rte_mbuf *m, uint16_t l2_len, uint16_t l3_len)
{
	m->l2_len = l2_len;
	m->l3_len = l3_len;
}
uint32_t fp_ip_frag_death_row_mbuf_len(void) { return RTE_IP_FRAG_DEATH_ROW_MBUF_LEN; }
uint32_t fp_ip_frag_max_frag(void) { return RTE_LIBRTE_IP_FRAG_MAX_FRAG; }

/*
 * DPDK 22.11's librte_pdump removes its RX/TX callbacks when a capture tool (dpdk-dumpcap,
 * dpdk-pdump) stops, and answers the tool at once; the tool then frees the ring and mempool the
 * callbacks copy into. An lcore still inside the callback (it loaded it before the removal, or
 * was preempted in it) then writes into freed, unmapped memory: the daemon died with SIGSEGV
 * in librte_mbuf in 2 of 10 runs of control/tests/capture.rs on a busy 2-CPU machine. `rte_eth_remove_rx_callback`
 * is documented as leaving that wait to its caller; DPDK later added it to pdump itself (a use
 * count per callback).
 *
 * fastpathd's binary exports these two definitions (control/build.rs), so librte_pdump's calls
 * bind to them: each calls DPDK's own, then, if it succeeded, the wait the application set
 * (every lcore through a poll it began after the removal). Elsewhere (tests, examples) nothing
 * exports them and they are only DPDK's.
 */
typedef int (*fp_remove_cb_fn)(uint16_t, uint16_t, const struct rte_eth_rxtx_callback *);

static void (*fp_removal_wait)(void);

void fp_set_callback_removal_wait(void (*wait)(void)) { __atomic_store_n(&fp_removal_wait, wait, __ATOMIC_RELEASE); }

static int fp_remove_then_wait(const char *name, uint16_t port_id, uint16_t queue_id,
			       const struct rte_eth_rxtx_callback *user_cb)
{
	fp_remove_cb_fn real = (fp_remove_cb_fn)dlsym(RTLD_NEXT, name);
	if (real == NULL)
		return -ENOTSUP;
	int rc = real(port_id, queue_id, user_cb);
	void (*wait)(void) = __atomic_load_n(&fp_removal_wait, __ATOMIC_ACQUIRE);
	if (rc == 0 && wait != NULL)
		wait();
	return rc;
}

int rte_eth_remove_rx_callback(uint16_t port_id, uint16_t queue_id, const struct rte_eth_rxtx_callback *user_cb)
{
	return fp_remove_then_wait("rte_eth_remove_rx_callback", port_id, queue_id, user_cb);
}

int rte_eth_remove_tx_callback(uint16_t port_id, uint16_t queue_id, const struct rte_eth_rxtx_callback *user_cb)
{
	return fp_remove_then_wait("rte_eth_remove_tx_callback", port_id, queue_id, user_cb);
}
