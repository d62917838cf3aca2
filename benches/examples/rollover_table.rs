//! Seed 002's bench_rollover table for a single-flow input, simulated: the real fanout decision
//! (`FanoutState::choose`) over 8 sockets of 256 packets whose consumers each serve 4 packets
//! per round, while one flow sends 28 per round in bursts of 28 (7 consumers' worth). Prints,
//! per socket, the packets delivered (enqueued), dropped (`socket_full`, counted on the socket
//! the flow hashes to), rollovers, huge-flow rollovers and failed rollovers, for rollover off,
//! rollover without the huge-flow rule (seed 002 patch 5) and with it (patch 6), and an overload
//! of 40 per round (more than the 32 all consumers serve) to show failed rollovers. Deterministic.
//!
//! `cargo run --release -p benches --example rollover_table`

use benches::{hash_for, sim_group, sim_queue};
use fastpath::pipeline::{Choice, FanoutState};

const SOCKETS: usize = 8;
const CAPACITY: usize = 256;
const SERVE: usize = 4;
const SEND: usize = 28;
const ROUNDS: usize = 20_000;
const OVERLOAD: usize = 40;

fn run(title: &str, send: usize, rollover: bool, huge_flows: bool) {
    let (group, sockets) = sim_group(SOCKETS, CAPACITY, rollover, huge_flows);
    let mut st = FanoutState::new(SOCKETS, 0, 0x5eed);
    // The flow hashes to the last socket, as in the seed's second table.
    let flow = hash_for(SOCKETS - 1, SOCKETS);
    let mut delivered = [0u64; SOCKETS];
    let mut dropped = [0u64; SOCKETS];
    for _ in 0..ROUNDS {
        for _ in 0..send {
            match st.choose(&group, &sockets, flow) {
                Choice::Socket(i) => delivered[i] += 1,
                Choice::Full(i) | Choice::FlowLimited(i) => dropped[i] += 1,
            }
        }
        for (i, s) in sockets.iter().enumerate() {
            sim_queue(s).push(st.staged(i));
        }
        st.burst_done();
        for s in &sockets {
            sim_queue(s).pop(SERVE);
            s.consumer_update_pressure();
        }
    }
    println!("{title}\n");
    println!("| socket | delivered | dropped | rollover | huge | failed |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut tot = [0u64; 5];
    for (i, s) in sockets.iter().enumerate() {
        let row = [
            delivered[i],
            dropped[i],
            s.counters.sum(|c| &c.rollover),
            s.counters.sum(|c| &c.rollover_huge),
            s.counters.sum(|c| &c.rollover_failed),
        ];
        for (t, v) in tot.iter_mut().zip(row) {
            *t += v;
        }
        println!(
            "| {i} | {} | {} | {} | {} | {} |",
            row[0], row[1], row[2], row[3], row[4]
        );
    }
    println!(
        "| all | {} | {} | {} | {} | {} |\n",
        tot[0], tot[1], tot[2], tot[3], tot[4]
    );
}

fn main() {
    println!(
        "One flow, {SEND} packets per round, {SOCKETS} sockets of {CAPACITY} each served {SERVE} per round, \
         {ROUNDS} rounds ({} packets sent).\n",
        SEND * ROUNDS
    );
    run("Rollover off (`rollover = false`):", SEND, false, false);
    run(
        "Rollover without the huge-flow rule (`huge_flow_rollover = false`, seed 002 patch 5):",
        SEND,
        true,
        false,
    );
    run(
        "Rollover with the huge-flow rule (the default, patch 6):",
        SEND,
        true,
        true,
    );
    run(
        &format!("Overload: {OVERLOAD} packets per round, more than all 8 consumers serve (huge-flow rule on):"),
        OVERLOAD,
        true,
        true,
    );
}
