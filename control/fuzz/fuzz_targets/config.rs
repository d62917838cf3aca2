//! Arbitrary bytes as a config file (`control::fuzzing::config_one`): the parser and every
//! section's validation must never panic, and every error must carry a line of the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = control::fuzzing::config_one(data);
});
