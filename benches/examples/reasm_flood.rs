//! Seed 001's scenario, simulated: legitimate fragmented datagrams mixed with a flood of first
//! fragments that never complete, from many sources, at several times the reassembly table's
//! capacity. Prints, per flood size, the fraction of legitimate datagrams reassembled with the
//! pressure-scaled timeout and with a fixed timeout, and the peak memory against high_thresh.
//!
//! `cargo run --release -p benches --example reasm_flood` (small table, seconds);
//! `FLOOD_DEFAULT_SCALE=1 ...` for the default 4 MiB table (about a minute).

use fastpath::pipeline::reasm::sim::{simulate_flood, FloodParams};

fn main() {
    let default_scale = std::env::var_os("FLOOD_DEFAULT_SCALE").is_some();
    let scale: fn(f64, bool) -> FloodParams = if default_scale {
        FloodParams::default_scale
    } else {
        FloodParams::seed_scenario
    };
    println!(
        "| flood × capacity | legitimate reassembled, pressure-scaled timeout | same, fixed timeout | peak memory / high_thresh |"
    );
    println!("| ---: | ---: | ---: | ---: |");
    for m in [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0] {
        let s = simulate_flood(&scale(m, true));
        let f = simulate_flood(&scale(m, false));
        println!(
            "| {m} | {:.3} | {:.3} | {:.4} |",
            s.completion_rate(),
            f.completion_rate(),
            s.max_memory as f64 / s.high_thresh as f64
        );
    }
}
