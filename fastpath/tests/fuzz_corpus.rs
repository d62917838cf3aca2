//! Replays the committed fuzz corpora (`fuzz/corpus/{parse,reasm,gre}/`) on stable, so every input that
//! once mattered keeps being checked without nightly or libFuzzer. Files named
//! `<outcome>--<what>` must also end in that outcome; other names (fuzzer finds, and
//! `crash--<what>` regressions) only must not panic.

use std::path::Path;

#[test]
fn replay_parse_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "corpus has {} files", files.len());
    let mut named = 0;
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let outcome = fastpath::fuzzing::parse_one(&bytes);
        let name = f.file_name().unwrap().to_string_lossy();
        if let Some((want, _)) = name.split_once("--").filter(|(w, _)| *w != "crash") {
            assert_eq!(outcome.name(), want, "{name}");
            named += 1;
        }
    }
    assert!(named >= 10, "only {named} corpus files name their outcome");
}

/// The corpus as one sequence of frames (each file a frame, length-prefixed as
/// `fuzzing::engine_frames` reads them) through the RX engine, and each file on its own as such
/// a sequence: every frame ends in exactly one outcome.
#[test]
fn replay_corpus_through_the_rx_engine() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse");
    let mut all = Vec::new();
    let mut n = 0u64;
    for e in std::fs::read_dir(&dir).unwrap() {
        let bytes = std::fs::read(e.unwrap().path()).unwrap();
        fastpath::fuzzing::engine_frames(&bytes);
        let len = bytes.len().min(u16::MAX as usize);
        all.extend_from_slice(&(len as u16).to_be_bytes());
        all.extend_from_slice(&bytes[..len]);
        n += 1;
    }
    assert_eq!(fastpath::fuzzing::engine_frames(&all), n);
}

fn corpus(sub: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(sub);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            (
                f.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(f).unwrap(),
            )
        })
        .collect()
}

/// The `reasm` corpus: each file a reassembly scenario whose checks (one outcome per fragment,
/// memory bound, all freed) hold; files named `<n>done-<n>refused-<n>expired--<what>` also end
/// with those counts.
#[test]
fn replay_reasm_corpus() {
    let files = corpus("reasm");
    assert!(files.len() >= 10, "reasm corpus has {} files", files.len());
    for (name, bytes) in &files {
        let run = fastpath::fuzzing::reasm_sequence(bytes);
        if let Some((want, _)) = name.split_once("--").filter(|(w, _)| w.ends_with("expired")) {
            assert_eq!(run.name(), want, "{name}");
        }
    }
}

/// The `gre` corpus: each file a sequence of GRE frames; files named `<outcome>+...--<what>`
/// also end in those outcomes, frame by frame.
#[test]
fn replay_gre_corpus() {
    let files = corpus("gre");
    assert!(files.len() >= 10, "gre corpus has {} files", files.len());
    let mut named = 0;
    for (name, bytes) in &files {
        let outcomes = fastpath::fuzzing::gre_frames(bytes);
        if let Some((want, _)) = name.split_once("--").filter(|(w, _)| !w.starts_with("crash")) {
            assert_eq!(fastpath::fuzzing::gre_name(&outcomes), want, "{name}");
            named += 1;
        }
    }
    assert!(named >= 10, "only {named} gre corpus files name their outcomes");
}
