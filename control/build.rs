//! Records the commit fastpathd is built from, for `--version`. A build outside a git checkout
//! (a source package) says `unknown`, or what `FASTPATHD_COMMIT` gives.

use std::process::Command;

fn main() {
    let commit = std::env::var("FASTPATHD_COMMIT").ok().or_else(|| {
        let out = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let mut c = String::from_utf8(out.stdout).ok()?.trim().to_string();
        let dirty = Command::new("git")
            .args(["status", "--porcelain", "--untracked-files=no"])
            .output()
            .ok()
            .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
        if dirty {
            c.push_str("-modified");
        }
        Some(c)
    });
    println!(
        "cargo:rustc-env=FASTPATHD_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".to_string())
    );
    println!("cargo:rerun-if-env-changed=FASTPATHD_COMMIT");
    // The shim's wrappers of DPDK's callback removal, exported so librte_pdump's calls bind to
    // them (dpdk-sys/shim.c says why): a capture tool stopping could crash the daemon.
    for f in ["rte_eth_remove_rx_callback", "rte_eth_remove_tx_callback"] {
        println!("cargo:rustc-link-arg-bin=fastpathd=-Wl,--export-dynamic-symbol={f}");
    }
    // HEAD moves on commit and checkout; the index on staging (the `-modified` mark).
    for f in ["../.git/HEAD", "../.git/index"] {
        if std::path::Path::new(f).exists() {
            println!("cargo:rerun-if-changed={f}");
        }
    }
}
