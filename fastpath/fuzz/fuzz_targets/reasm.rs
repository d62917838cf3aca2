//! Arbitrary bytes as a reassembly scenario (`fastpath::fuzzing::reasm_sequence`): IPv4 and
//! IPv6 fragments of a few datagrams, overlapping, duplicate, out of order, with time moving on
//! and tiny limits. Every fragment must end in exactly one outcome, memory must stay within the
//! threshold plus one datagram, and everything must be freed after the last timeout.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fastpath::fuzzing::reasm_sequence(data);
});
