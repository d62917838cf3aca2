//! Arbitrary bytes as a received frame: every wire view, the parse result, and the whole
//! pipeline (answers built in place included) must neither panic nor read out of bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fastpath::fuzzing::parse_one(data);
});
