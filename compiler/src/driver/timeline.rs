//! What ran, step by step: node spans for `--trace` (Chrome trace / Perfetto JSON, one track
//! per device and one for transfers), node times for `--write-profile`, and each node's time
//! and path for the per-op profile (`--ops`, `--profile-ops`: [`super::ops`]).

use super::job::Job;
use super::ops::OpTimes;
use crate::backend::Backend;
use crate::placement::cost::{signature, Profile};
use crate::trace;
use graphc_ir::{DeviceKind, Module, Node, Op};
use graphc_runtime::RunOutput;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// Node timelines of every step, for `--trace`, and node times, for `--write-profile`.
#[derive(Debug)]
pub struct Timeline {
    /// Per request: its graph and the track its nodes go on.
    graphs: Vec<String>,
    tracks: Vec<String>,
    origin: Option<Instant>,
    pub spans: Vec<trace::Span>,
    /// Spans past [`trace::MAX_SPANS`] and node executions the runtime did not record.
    pub dropped: u64,
    pub profile: Profile,
    /// What ran the nodes: the kind of device each node's time is measured on, asked once
    /// per node (per request and node).
    backend: &'static dyn Backend,
    kinds: HashMap<(usize, Node), DeviceKind>,
    /// What it keeps: spans, node kinds' times, per-op times ([`Timeline::keeping`]).
    keep_spans: bool,
    keep_kinds: bool,
    /// Per node: its time and path in the measured steps, when kept.
    pub ops: Option<OpTimes>,
}

impl Timeline {
    pub fn new(job: &Job, m: &Module, backend: &'static dyn Backend) -> Timeline {
        let tracks = job
            .requests
            .iter()
            .map(|r| {
                let g = m.graph(&r.graph).expect("requested graphs exist");
                let device = g.regions[g.body].nodes.first().and_then(|&n| g.nodes[n].device.clone());
                match device.filter(|d| !d.is_empty()) {
                    Some(d) if job.requests.len() > 1 => d.short_name(),
                    _ => r.graph.clone(),
                }
            })
            .collect();
        let graphs = job.requests.iter().map(|r| r.graph.clone()).collect();
        Timeline {
            graphs,
            tracks,
            origin: None,
            spans: Vec::new(),
            dropped: 0,
            profile: Profile::new(),
            backend,
            kinds: HashMap::new(),
            keep_spans: true,
            keep_kinds: true,
            ops: None,
        }
    }

    /// Keeps only what is asked for: spans (`--trace`), node kinds' times (`--write-profile`),
    /// per-op times (the per-op profile). By default the first two.
    pub fn keeping(mut self, spans: bool, kinds: bool, ops: bool) -> Timeline {
        self.keep_spans = spans;
        self.keep_kinds = kinds;
        self.ops = ops.then(OpTimes::default);
        self
    }

    /// The graph of each request, in order.
    pub fn graphs(&self) -> &[String] {
        &self.graphs
    }

    /// Records a step's node executions; `profile`: it is a measured step, whose times go in
    /// the profiles.
    pub fn record(&mut self, m: &Module, step_start: Instant, outs: &[RunOutput], profile: bool) {
        if let Some(ops) = self.ops.as_mut().filter(|_| profile) {
            ops.record(m, &self.graphs, outs);
        }
        if !self.keep_spans && !self.keep_kinds {
            return;
        }
        let origin = *self.origin.get_or_insert(step_start);
        let us = |t: Instant| t.saturating_duration_since(origin).as_secs_f64() * 1e6;
        let mut sends: BTreeMap<&str, Instant> = BTreeMap::new();
        let mut recvs: Vec<(&str, Instant)> = Vec::new();
        for (i, o) in outs.iter().enumerate() {
            let g = m.graph(&self.graphs[i]).expect("the graph ran");
            self.dropped += o.events_dropped;
            for e in &o.events {
                let nd = &g.nodes[e.node];
                let secs = e.end.saturating_duration_since(e.start).as_secs_f64();
                if profile && self.keep_kinds {
                    let backend = self.backend;
                    let kind = *self.kinds.entry((i, e.node)).or_insert_with(|| backend.runs_on(g, e.node));
                    self.profile.record(kind, signature(g, e.node), secs);
                }
                if !self.keep_spans {
                    continue;
                }
                if self.spans.len() >= trace::MAX_SPANS {
                    self.dropped += 1;
                    continue;
                }
                self.spans.push(trace::Span {
                    track: self.tracks[i].clone(),
                    name: g.describe(e.node).trim_matches('\'').to_string(),
                    category: nd.op.kind().name().to_string(),
                    start_us: us(e.start),
                    dur_us: secs * 1e6,
                    args: vec![("graph".into(), g.name.clone()), ("depth".into(), e.depth.to_string())],
                });
                match (nd.op, &e.key) {
                    (Op::Send, Some(k)) => {
                        sends.insert(k, e.start);
                    }
                    (Op::Recv, Some(k)) => recvs.push((k, e.end)),
                    _ => {}
                }
            }
        }
        // A transfer runs from its send to the moment the recv has the tensor.
        for (key, arrived) in recvs.into_iter().filter(|_| self.keep_spans) {
            if let Some(&sent) = sends.get(key) {
                if self.spans.len() >= trace::MAX_SPANS {
                    self.dropped += 1;
                    continue;
                }
                let start = us(sent);
                self.spans.push(trace::Span {
                    track: trace::TRANSFERS.into(),
                    name: key.split(';').next().unwrap_or(key).to_string(),
                    category: "transfer".into(),
                    start_us: start,
                    dur_us: (us(arrived) - start).max(0.0),
                    args: vec![("key".into(), key.to_string())],
                });
            }
        }
    }

    pub fn chrome_trace(&self) -> String {
        let mut tracks = self.tracks.clone();
        tracks.push(trace::TRANSFERS.into());
        trace::chrome_trace(&tracks, &self.spans)
    }
}
