//! `configs/alerts.yml`: valid rules whose unit tests (`configs/alerts.test.yml`) pass under
//! promtool (ci/test runs the same), over metric families the contract lists.

mod common;

use common::{missing, repo};
use std::process::Command;

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("promtool is needed (package prometheus; ci/setup installs it)");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    if missing(&["promtool"]) {
        return;
    }
    promtool(&["check", "rules", "configs/alerts.yml"]);
    promtool(&["test", "rules", "configs/alerts.test.yml"]);
}

#[test]
fn alert_rules_use_only_families_of_the_contract() {
    let rules = std::fs::read_to_string(repo().join("configs/alerts.yml")).unwrap();
    let contract = std::fs::read_to_string(repo().join("docs/contract.md")).unwrap();
    let mut used = 0;
    for line in rules.lines().filter(|l| !l.trim_start().starts_with('#')) {
        for word in line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("fastpath_") {
                used += 1;
                assert!(
                    contract.contains(&format!("`{word}`")),
                    "alerts.yml uses {word}, not in docs/contract.md"
                );
            }
        }
    }
    assert!(used >= 10, "{used}");
}
