//! Arbitrary bytes as a sequence of received frames through the RX engine (reassembly across
//! bursts, sockets that fill, answers batched and fragmented, timeouts, the clean stop): it must
//! never panic, and every frame must end in exactly one outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fastpath::fuzzing::engine_frames(data);
});
