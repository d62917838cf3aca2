/*
 * Why this shim exists: DPDK's fast-path API (rte_eth_rx_burst, rte_eth_tx_burst,
 * rte_pktmbuf_alloc, the ring bursts, rte_lcore_id, rte_errno, ...) is made of
 * `static inline` functions and macros in the headers. They have no symbol in the
 * shared libraries, so Rust cannot call them through bindgen's declarations alone.
 * Each function below is a thin, out-of-line copy with the `fp_` prefix. They are
 * meant to be called once per burst, not once per packet, so the call overhead is
 * amortised. Field accesses on `struct rte_mbuf` that are plain members
 * (data_off, data_len, pkt_len, port, ...) are done in Rust directly.
 */
#ifndef FASTPATH_DPDK_SHIM_H
#define FASTPATH_DPDK_SHIM_H

#include <stdint.h>
#include <rte_config.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_pause.h>
#include <rte_mempool.h>
#include <rte_pdump.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <rte_version.h>
#include <rte_thash.h>
#include <rte_dev.h>
#include <rte_ip.h>
#include <rte_ip_frag.h>

uint16_t fp_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts, uint16_t nb_pkts);
uint16_t fp_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

struct rte_mbuf *fp_pktmbuf_alloc(struct rte_mempool *mp);
int fp_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count);
void fp_pktmbuf_free(struct rte_mbuf *m);
char *fp_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *fp_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *fp_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int fp_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
uint16_t fp_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t fp_pktmbuf_tailroom(const struct rte_mbuf *m);
uint32_t fp_mbuf_rss_hash(const struct rte_mbuf *m);
int fp_mbuf_has_rss_hash(const struct rte_mbuf *m);
void fp_mbuf_refcnt_update(struct rte_mbuf *m, int16_t v);
void fp_mempool_put_bulk(struct rte_mempool *mp, void *const *objs, unsigned n);
/* Straight into the pool's shared store, bypassing the calling lcore's cache. */
void fp_mempool_put_bulk_uncached(struct rte_mempool *mp, void *const *objs, unsigned n);
unsigned fp_mempool_avail_count(const struct rte_mempool *mp);
unsigned fp_mempool_in_use_count(const struct rte_mempool *mp);

unsigned fp_ring_enqueue_burst(struct rte_ring *r, void *const *objs, unsigned n, unsigned *free_space);
unsigned fp_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned n, unsigned *available);
unsigned fp_ring_count(const struct rte_ring *r);
unsigned fp_ring_free_count(const struct rte_ring *r);

unsigned fp_lcore_id(void);
int fp_errno(void);
uint64_t fp_rdtsc(void);
void fp_pause(void);
const char *fp_version(void);

/*
 * DPDK's log into a callback: makes an unbuffered fopencookie(3) stream whose writes call
 * `cb(level, text, len)` with the current message's level (rte_log_cur_msg_loglevel), makes it
 * DPDK's log stream (rte_openlog_stream) and sets the global level. 0 on success.
 * fopencookie is a glibc extension the libc crate does not bind, hence here.
 */
typedef void (*fp_log_cb)(uint32_t level, const char *text, size_t len);
int fp_log_to(fp_log_cb cb, uint32_t global_level);
/* RTE_ETH_RSS_* are RTE_BIT64() macros bindgen cannot evaluate. */
uint64_t fp_rss_hf_ip_udp_tcp(void);
/* RTE_ETH_RX_OFFLOAD_IPV4_CKSUM, an RTE_BIT64() too. */
uint64_t fp_rx_offload_ipv4_cksum(void);
/* RTE_ETH_RX_OFFLOAD_UDP_CKSUM, the same. */
uint64_t fp_rx_offload_udp_cksum(void);
/* rte_softrss is static inline too: the software Toeplitz hash DPDK itself offers. */
uint32_t fp_softrss(uint32_t *input_tuple, uint32_t input_len, const uint8_t *rss_key);

/* Pins the calling thread to the `n` CPUs in `cpus` (pthread_setaffinity_np): how fastpathd
 * keeps its control and metrics threads off the CPUs of RX lcores. 0 or an errno value. */
int fp_pin_current_thread(const uint32_t *cpus, uint32_t n);
/* Pins thread `tid` of this process (a kernel thread id) to `cpus`: 0 or an errno. */
int fp_pin_thread(int tid, const uint32_t *cpus, uint32_t n);

/*
 * DPDK's own IP reassembly (librte_ip_frag), the benchmark's anchor beside fastpathd's
 * reassembly (benches/examples/ip_frag_anchor.rs): the two `static inline` helpers of
 * rte_ip_frag.h, and the mbuf fields reassembly reads. rte_ipv4_frag_reassemble_packet and
 * rte_ipv6_frag_reassemble_packet require l2_len and l3_len set (rte_ip_frag.h); they are
 * bit-fields inside an anonymous union of struct rte_mbuf, which bindgen exposes only through
 * generated accessors, so they are set here.
 */
int fp_ipv4_frag_pkt_is_fragmented(const struct rte_ipv4_hdr *hdr);
struct rte_ipv6_fragment_ext *fp_ipv6_frag_get_ipv6_fragment_header(struct rte_ipv6_hdr *hdr);
void fp_mbuf_set_l2_l3_len(struct rte_mbuf *m, uint16_t l2_len, uint16_t l3_len);
/* RTE_IP_FRAG_DEATH_ROW_MBUF_LEN and RTE_LIBRTE_IP_FRAG_MAX_FRAG, macros of expressions. */
uint32_t fp_ip_frag_death_row_mbuf_len(void);
uint32_t fp_ip_frag_max_frag(void);

/* What runs after an ethdev RX or TX callback is removed, before the removal returns (see
 * shim.c): the application's wait until no lcore can still be inside the removed callback. */
void fp_set_callback_removal_wait(void (*wait)(void));

/* The socket of `net_af_packet` RX queue `queue` of started port `port` (queue < its RX queues),
 * or -1: the PMD (22.11) offers no RX interrupt, but its queue is an AF_PACKET socket that
 * poll() reports readable when a frame waits in its ring. Read from the queue's private struct
 * (`struct pkt_rx_queue`, whose first member is `int sockfd`); the caller checks that the fd
 * is an AF_PACKET socket bound to the port's interface before it uses it. */
int fp_af_packet_rxq_sockfd(uint16_t port, uint16_t queue);

#endif
