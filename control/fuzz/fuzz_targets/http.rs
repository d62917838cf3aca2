//! Arbitrary bytes as what a client sends on one connection to the metrics endpoint
//! (`control::fuzzing::http_exchange`: hyper's request parsing and the endpoint's answers over
//! an in-memory stream, on a current-thread runtime with paused time). It must never panic,
//! and must answer or close.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
    }
    RT.with(|rt| {
        let _ = control::fuzzing::http_exchange(rt, data);
    });
});
