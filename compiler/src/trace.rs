//! Timelines as Chrome trace / Perfetto JSON (the "Trace Event Format"): one track per device
//! and one for transfers. `graphc run --trace` writes measured timelines, `graphc simulate
//! --trace` predicted ones, in the same form, so the two open side by side in ui.perfetto.dev.

use serde_json::{json, Value as Json};

/// One span on a track.
#[derive(Clone, Debug)]
pub struct Span {
    pub track: String,
    pub name: String,
    pub category: String,
    /// Microseconds from the start of the timeline.
    pub start_us: f64,
    pub dur_us: f64,
    pub args: Vec<(String, String)>,
}

/// The name of the track that holds transfers.
pub const TRANSFERS: &str = "transfers";

/// The most spans a timeline keeps: a long run's trace stops growing there (its writer says
/// how many it left out), so tracing cannot exhaust memory.
pub const MAX_SPANS: usize = 1 << 20;

/// The trace JSON. Tracks are threads of one process, in the order given; transfers may
/// overlap one another, so they are async slices, which a viewer stacks. Written event by
/// event into one string: a tree of JSON values for a long trace would take many times its
/// text.
pub fn chrome_trace(tracks: &[String], spans: &[Span]) -> String {
    let tid = |track: &str| tracks.iter().position(|t| t == track).map(|i| i + 1).unwrap_or(tracks.len() + 1);
    let mut out = String::from("{\"traceEvents\":[");
    let mut first = true;
    let mut push = |e: Json| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(&e.to_string());
    };
    push(json!({"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "graphc"}}));
    for (i, t) in tracks.iter().enumerate() {
        push(json!({"ph": "M", "pid": 1, "tid": i + 1, "name": "thread_name", "args": {"name": t}}));
        push(json!({"ph": "M", "pid": 1, "tid": i + 1, "name": "thread_sort_index", "args": {"sort_index": i}}));
    }
    for (id, s) in spans.iter().enumerate() {
        let args: serde_json::Map<String, Json> = s.args.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let base = json!({"pid": 1, "tid": tid(&s.track), "name": s.name, "cat": s.category});
        if s.track == TRANSFERS {
            let mut b = base.clone();
            b["ph"] = json!("b");
            b["id"] = json!(id);
            b["ts"] = json!(s.start_us);
            b["args"] = Json::Object(args);
            let mut e = base;
            e["ph"] = json!("e");
            e["id"] = json!(id);
            e["ts"] = json!(s.start_us + s.dur_us);
            push(b);
            push(e);
        } else {
            let mut x = base;
            x["ph"] = json!("X");
            x["ts"] = json!(s.start_us);
            x["dur"] = json!(s.dur_us);
            x["args"] = Json::Object(args);
            push(x);
        }
    }
    out.push_str("],\"displayTimeUnit\":\"ms\"}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_and_slices() {
        let spans = vec![
            Span {
                track: "cpu0".into(),
                name: "matmul %h".into(),
                category: "contraction".into(),
                start_us: 1.0,
                dur_us: 5.0,
                args: vec![],
            },
            Span {
                track: TRANSFERS.into(),
                name: "h".into(),
                category: "transfer".into(),
                start_us: 6.0,
                dur_us: 2.0,
                args: vec![],
            },
        ];
        let v: Json = serde_json::from_str(&chrome_trace(&["cpu0".into(), TRANSFERS.into()], &spans)).unwrap();
        let ev = v["traceEvents"].as_array().unwrap();
        assert!(ev.iter().any(|e| e["ph"] == "X" && e["tid"] == 1 && e["dur"] == 5.0));
        assert!(ev.iter().any(|e| e["ph"] == "b" && e["tid"] == 2));
        assert!(ev.iter().any(|e| e["ph"] == "e" && e["ts"] == 8.0));
        assert!(ev.iter().any(|e| e["name"] == "thread_name" && e["args"]["name"] == "transfers"));
    }
}
