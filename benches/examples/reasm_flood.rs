//! Seed 001's scenario and the line-rate floods, simulated (deterministic, simulated time):
//! legitimate fragmented datagrams among a flood of datagrams that never complete, under the
//! `probation` policy (the default) and seed 001's `linux` policy.
//!
//! Prints two tables: the fraction of legitimate datagrams reassembled per flood size with the
//! flood spread over the timeout (seed 001's scenario), and at line rate (first fragments
//! cycling through 9× and 100× the table's capacity, fresh ones, and FragmentSmack), with the
//! peak memory against high_thresh.
//!
//! `cargo run --release -p benches --example reasm_flood` (small table, seconds);
//! `FLOOD_DEFAULT_SCALE=1 ...` for the default 4 MiB table in the first table (about a minute).

use fastpath::pipeline::reasm::sim::{simulate_flood, FloodKind, FloodParams};
use fastpath::pipeline::reasm::Policy;

fn main() {
    let default_scale = std::env::var_os("FLOOD_DEFAULT_SCALE").is_some();
    let scale: fn(f64, bool) -> FloodParams = if default_scale {
        FloodParams::default_scale
    } else {
        FloodParams::seed_scenario
    };
    println!("Flood spread over the timeout (seed 001's scenario), legitimate datagrams reassembled:\n");
    println!("| flood × capacity | probation | linux, pressure-scaled timeout | linux, fixed timeout | peak memory / high_thresh (probation, linux) |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for m in [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0] {
        let p = simulate_flood(&scale(m, true).with_policy(Policy::Probation));
        let s = simulate_flood(&scale(m, true));
        let f = simulate_flood(&scale(m, false));
        println!(
            "| {m} | {:.3} | {:.3} | {:.3} | {:.4}, {:.4} |",
            p.completion_rate(),
            s.completion_rate(),
            f.completion_rate(),
            p.max_memory as f64 / p.high_thresh as f64,
            s.max_memory as f64 / s.high_thresh as f64
        );
    }
    println!("\nAt line rate (10 Mpps of flood, 256 KiB = 113 datagrams, legitimate fragments 2 µs apart):\n");
    println!("| flood | probation | linux | peak memory / high_thresh (probation, linux) |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, params) in line_rate_scenarios() {
        let p = simulate_flood(&params.clone().with_policy(Policy::Probation));
        let l = simulate_flood(&params.with_policy(Policy::Linux));
        println!(
            "| {name} | {:.3} | {:.3} | {:.4}, {:.4} |",
            p.completion_rate(),
            l.completion_rate(),
            p.max_memory as f64 / p.high_thresh as f64,
            l.max_memory as f64 / l.high_thresh as f64
        );
    }
}

fn line_rate_scenarios() -> Vec<(String, FloodParams)> {
    let cap = FloodParams::line_rate(FloodKind::FirstFragments, 1.0, 0).capacity() as u32;
    vec![
        (
            "none (in order)".into(),
            FloodParams::line_rate(FloodKind::FirstFragments, 0.0, 0),
        ),
        (
            format!("first fragments, 9× capacity ({})", 9 * cap),
            FloodParams::line_rate(FloodKind::FirstFragments, 10e6, 9 * cap),
        ),
        (
            format!("first fragments, 100× capacity ({})", 100 * cap),
            FloodParams::line_rate(FloodKind::FirstFragments, 10e6, 100 * cap),
        ),
        (
            "first fragments, every one new".into(),
            FloodParams::line_rate(FloodKind::FirstFragments, 10e6, 0),
        ),
        (
            "FragmentSmack, 600 datagrams × 8 fragments of 8 bytes".into(),
            FloodParams::line_rate(
                FloodKind::Smack {
                    datagrams: 600,
                    fragments: 8,
                },
                10e6,
                0,
            ),
        ),
        (
            "FragmentSmack, 60 datagrams × 64 fragments".into(),
            FloodParams::line_rate(
                FloodKind::Smack {
                    datagrams: 60,
                    fragments: 64,
                },
                10e6,
                0,
            ),
        ),
        (
            "FragmentSmack, 6000 datagrams × 8 fragments".into(),
            FloodParams::line_rate(
                FloodKind::Smack {
                    datagrams: 6000,
                    fragments: 8,
                },
                10e6,
                0,
            ),
        ),
        (
            "first fragments, every one new; legitimate fragments 20 µs apart".into(),
            FloodParams {
                fragment_gap_ns: 20_000,
                ..FloodParams::line_rate(FloodKind::FirstFragments, 10e6, 0)
            },
        ),
        (
            "the same with the default 4 MiB table (1820 datagrams)".into(),
            FloodParams {
                fragment_gap_ns: 20_000,
                config: fastpath::pipeline::reasm::ReasmConfig::default(),
                ..FloodParams::line_rate(FloodKind::FirstFragments, 10e6, 0)
            },
        ),
    ]
}
