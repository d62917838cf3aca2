//! Trace records ([`fastpath::trace::Record`]) for people and programs: one JSON object per
//! packet (`fastpathctl trace --json`, `fastpathd --explain --json`) and one line per packet,
//! made from that object, so both commands print the same thing.

use fastpath::pipeline::Tables;
use fastpath::trace::Record;
use serde_json::{json, Value};

/// The record as the JSON object of the contract (`docs/contract.md`, "Trace records"), with
/// names from `t`.
pub fn to_json(r: &Record, t: Option<&Tables>) -> Value {
    let stages: Vec<Value> = r
        .notes()
        .iter()
        .map(|n| json!({"stage": n.stage(), "reason": n.reason(t, &r.summary)}))
        .collect();
    let mut v = json!({
        "lcore": r.lcore,
        "role": if r.worker { "worker" } else { "rx" },
        "time_ns": r.time_ns,
        "port": r.port,
        "queue": r.queue,
        "generation": r.generation,
        "summary": r.summary.line(),
        "stages": stages,
        "outcome": r.outcome.name(),
    });
    if let Some(ip) = &r.summary.ip {
        v["src"] = json!(ip.src.to_string());
        v["dst"] = json!(ip.dst.to_string());
        v["protocol"] = json!(fastpath::trace::protocol_name(ip.protocol));
        if let Some((s, d)) = ip.ports {
            v["sport"] = json!(s);
            v["dport"] = json!(d);
        }
    }
    v
}

/// One line for a record object of [`to_json`]:
/// `lcore 0 port 0/0 t=1.000000 198.51.100.7:4000 > 192.0.2.1:7 udp len 43 | service: echo socket 0 => delivered`.
pub fn line(v: &Value) -> String {
    let stages: Vec<String> = v["stages"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    format!(
                        "{}: {}",
                        s["stage"].as_str().unwrap_or("?"),
                        s["reason"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{}lcore {} port {}/{} t={:.6} {} | {} => {}",
        if v["role"] == "worker" { "worker " } else { "" },
        v["lcore"],
        v["port"],
        v["queue"],
        v["time_ns"].as_u64().unwrap_or(0) as f64 / 1e9,
        v["summary"].as_str().unwrap_or(""),
        stages.join(" | "),
        v["outcome"].as_str().unwrap_or("?")
    )
}
