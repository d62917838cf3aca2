//! Arbitrary bytes as a sequence of GRE frames (`fastpath::fuzzing::gre_frames`): outer and
//! inner headers, key, checksum and sequence flags, nesting past the limit, through the
//! pipeline with four tunnels. Never panics, and well-formed tunnelled echo requests are
//! answered (or refused as too deep).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fastpath::fuzzing::gre_frames(data);
});
