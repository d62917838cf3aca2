//! Generates bindings to the system DPDK (found with pkg-config) and compiles the
//! C shim that gives DPDK's `static inline` fast-path functions a symbol.

use std::env;
use std::path::PathBuf;

fn fail(msg: &str) -> ! {
    // One line that says what to install: cargo shows it as the build error.
    eprintln!("error: {msg}");
    println!("cargo::error={msg}");
    std::process::exit(1);
}

fn main() {
    println!("cargo:rerun-if-changed=shim.h");
    println!("cargo:rerun-if-changed=shim.c");
    println!("cargo:rerun-if-changed=build.rs");

    let dpdk = match pkg_config::Config::new()
        .atleast_version("22.11")
        .cargo_metadata(true)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(_) => fail(
            "DPDK 22.11 (pkg-config libdpdk) not found; install it with: apt-get install -y libdpdk-dev pkg-config",
        ),
    };

    // libdpdk.pc puts `-include rte_config.h -march=corei7` into CFLAGS; the same flags
    // must reach both clang (bindgen) and cc, or struct layouts may differ.
    let mut clang_args: Vec<String> = Vec::new();
    for p in &dpdk.include_paths {
        clang_args.push(format!("-I{}", p.display()));
    }
    clang_args.push("-include".into());
    clang_args.push("rte_config.h".into());
    clang_args.push("-march=corei7".into());

    let mut build = cc::Build::new();
    build.file("shim.c").opt_level(3).flag("-march=corei7");
    build.flag("-include").flag("rte_config.h");
    for p in &dpdk.include_paths {
        build.include(p);
    }
    build.warnings(false).compile("fastpath_dpdk_shim");

    // clang-sys panics when it cannot load libclang: turn that into the one-line message.
    std::panic::set_hook(Box::new(|_| {}));
    let clang = std::panic::catch_unwind(bindgen::clang_version);
    let _ = std::panic::take_hook();
    if clang.is_err() {
        fail("libclang not found; install it with: apt-get install -y clang libclang-dev");
    }

    let bindings = bindgen::Builder::default()
        .header("shim.h")
        .clang_args(&clang_args)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        // Only what the fast path and its control code use.
        .allowlist_function("fp_.*")
        .allowlist_function("rte_eal_(init|cleanup|mp_remote_launch|remote_launch|wait_lcore|mp_wait_lcore|process_type|get_runtime_dir)")
        .allowlist_function("rte_lcore_(count|is_enabled|to_socket_id)")
        .allowlist_function("rte_get_(main_lcore|next_lcore|tsc_hz)")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_pdump_(init|uninit)")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_pktmbuf_pool_create(_by_ops)?")
        .allowlist_function("rte_mempool_free")
        .allowlist_function("rte_pktmbuf_free_bulk")
        .allowlist_function("rte_eth_(dev_count_avail|dev_get_port_by_name|dev_info_get|dev_configure|rx_queue_setup|tx_queue_setup|dev_start|dev_stop|dev_close|stats_get|stats_reset|macaddr_get|promiscuous_enable|dev_socket_id|dev_get_name_by_port|dev_set_mtu|link_get_nowait|dev_adjust_nb_rx_tx_desc|dev_rx_intr_ctl_q_get_fd|dev_rx_intr_enable|xstats_get|xstats_get_names)")
        .allowlist_function("rte_ring_(create|free)")
        .allowlist_function("rte_dev_probe")
        .allowlist_function("rte_eth_promiscuous_disable")
        // librte_ip_frag (in libdpdk.pc's libraries): DPDK's reassembly, the benchmark's anchor.
        .allowlist_function("rte_ip_frag_(table_create|table_destroy|free_death_row)")
        .allowlist_function("rte_ipv(4|6)_frag_reassemble_packet")
        .allowlist_type("rte_ip_frag_death_row")
        .allowlist_var("RTE_IP_FRAG_.*")
        .allowlist_var("RTE_ETH_.*")
        .allowlist_var("RTE_MBUF_.*")
        .allowlist_var("RTE_PKTMBUF_.*")
        .allowlist_var("RTE_MAX_.*")
        .allowlist_var("RING_F_.*")
        .allowlist_var("RTE_VER_.*")
        .allowlist_var("SOCKET_ID_ANY")
        .allowlist_type("rte_mbuf")
        .allowlist_type("rte_eth_.*")
        .allowlist_type("rte_rmt_call_main_t")
        // Packed structs nested in aligned ones that rustc cannot lay out.
        .opaque_type("rte_l2tpv2_.*")
        .opaque_type("rte_gtp_.*")
        .opaque_type("rte_arp_hdr")
        .blocklist_type("max_align_t")
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(true)
        .generate_comments(false)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen failed on the DPDK headers: {e}")));

    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", out.display())));
}
