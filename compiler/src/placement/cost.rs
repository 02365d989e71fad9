//! The cost model: how long a node takes on a device and how long a tensor takes to cross a
//! link. Node times come from a profile of earlier runs when it has the node's signature, and
//! otherwise from static heuristics (elements touched and flops, by op) calibrated against
//! the reference CPU; either is divided by the device's speed for the op's class. A profile's
//! times measured on another kind of device (a GPU's) are that kind's own, taken as they are.

use super::cluster::Cluster;
use graphc_ir::{Cost, DeviceKind, Graph, Node, RegionFlow, Type};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The reference CPU: graphc's interpreter on one core of the 2-core x86-64 build machine,
/// measured with `graphc run --steps 50` on one-op graphs (add, exp, reduce_sum, transpose on
/// 2^20 elements, a 256^3 matmul, a chain of ten 4-element adds) and, for the step and
/// transfer costs, with `--trace` on ir-spec/examples/partitioned.gir. Seconds per unit.
mod reference {
    /// Every node: dispatch, operand lookup, the result's type check.
    pub const NODE: f64 = 1.3e-6;
    /// Every node, beyond the time a profile measured for it (which spans the kernel and
    /// the type check): dispatch and binding the results.
    pub const NODE_UNMEASURED: f64 = 0.3e-6;
    /// A step: planning the run; and handing each further graph of the step to a worker.
    pub const STEP: f64 = 3e-6;
    pub const EXTRA_GRAPH: f64 = 10e-6;
    /// Per output element of arithmetic (add, mul, compare, select, ...), with its allocation.
    pub const ELEM: f64 = 2.2e-9;
    /// Per output element of exp, log, sigmoid, sqrt.
    pub const ELEM_TRANSCENDENTAL: f64 = 5.5e-9;
    /// Per output element of tanh and pow (libm's are slow), and erf.
    pub const ELEM_TANH_POW: f64 = 20e-9;
    pub const ELEM_ERF: f64 = 10e-9;
    /// Per element moved by reshape, broadcast, slice, concat, gather, cast, constant.
    pub const MOVE: f64 = 3e-9;
    /// Per element of a transpose (strided reads).
    pub const TRANSPOSE: f64 = 9e-9;
    /// Per input element of a reduction (f64 accumulation).
    pub const REDUCE: f64 = 2.1e-9;
    /// Per element of softmax (max, exp, sum, divide).
    pub const SOFTMAX: f64 = 9e-9;
    /// Matmul flops per second (matrixmultiply's packed kernel).
    pub const MATMUL_FLOPS: f64 = 27e9;
    /// Convolution flops per second (plain loops).
    pub const CONV_FLOPS: f64 = 1.5e9;
    /// Per window element of a pooling.
    pub const POOL: f64 = 2.5e-9;
}

/// How many iterations a `while` is assumed to run when no profile says how long it takes.
pub const ASSUMED_TRIPS: f64 = 10.0;

/// Measured node times from earlier runs, by node signature (`graphc run --write-profile`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Profile {
    pub format: String,
    pub version: u32,
    /// Signature to measurement, on the reference CPU's kind of device.
    pub ops: BTreeMap<String, Measured>,
    /// Measured on devices of other kinds: kind (`gpu`) to signature to measurement, written
    /// by runs whose backend ran those nodes there (`--backend cuda`). The cost model takes
    /// them as they are on a device of that kind, not scaled by its speed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<String, BTreeMap<String, Measured>>,
}

/// The mean time of one kind of node.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Measured {
    pub mean_us: f64,
    pub count: u64,
}

const PROFILE_FORMAT: &str = "graphc-profile";

impl Profile {
    pub fn new() -> Profile {
        Profile { format: PROFILE_FORMAT.into(), version: 1, ops: BTreeMap::new(), devices: BTreeMap::new() }
    }

    /// Adds one measurement of a node of signature `sig` that ran on a device of kind `on`.
    pub fn record(&mut self, on: DeviceKind, sig: String, seconds: f64) {
        let table = match on {
            DeviceKind::Cpu => &mut self.ops,
            other => self.devices.entry(other.name().to_string()).or_default(),
        };
        let m = table.entry(sig).or_default();
        m.mean_us += (seconds * 1e6 - m.mean_us) / (m.count + 1) as f64;
        m.count += 1;
    }

    /// How many times it holds: a kind of node on a kind of device each.
    pub fn len(&self) -> usize {
        self.ops.len() + self.devices.values().map(BTreeMap::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn load(path: &Path) -> Result<Profile, String> {
        let bytes = graphc_runtime::fsutil::read_regular(path, "a graphc profile (JSON)")
            .map_err(|e| e.replacen("cannot read ", "cannot read profile ", 1))?;
        let text = String::from_utf8(bytes).map_err(|_| format!("profile {} is not UTF-8 text", path.display()))?;
        let p: Profile =
            serde_json::from_str(&text).map_err(|e| format!("{} is not a graphc profile: {e}", path.display()))?;
        if p.format != PROFILE_FORMAT || p.version != 1 {
            return Err(format!(
                "{}: format '{}' version {}; expected '{PROFILE_FORMAT}' version 1 (written by graphc run --write-profile)",
                path.display(),
                p.format,
                p.version
            ));
        }
        for (kind, table) in &p.devices {
            if !matches!(DeviceKind::from_name(kind), Some(k) if k != DeviceKind::Cpu) {
                return Err(format!(
                    "{}: devices.{kind}: expected a device kind other than the reference CPU's (gpu)",
                    path.display()
                ));
            }
            check_times(path, &format!("devices.{kind}"), table)?;
        }
        check_times(path, "ops", &p.ops)?;
        Ok(p)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile serializes")
    }

    /// The times measured on devices of kind `on`, if any.
    fn table(&self, on: DeviceKind) -> Option<&BTreeMap<String, Measured>> {
        match on {
            DeviceKind::Cpu => Some(&self.ops),
            other => self.devices.get(other.name()),
        }
    }

    /// Seconds a node of this signature took on a device of kind `on`, if measured.
    fn seconds(&self, on: DeviceKind, sig: &str) -> Option<f64> {
        self.table(on)?.get(sig).map(|m| m.mean_us * 1e-6)
    }
}

/// Every time of a profile's table is a finite, non-negative mean of at least one run.
fn check_times(path: &Path, table: &str, times: &BTreeMap<String, Measured>) -> Result<(), String> {
    match times.iter().find(|(_, m)| !(m.mean_us.is_finite() && m.mean_us >= 0.0 && m.count > 0)) {
        Some((sig, m)) => Err(format!(
            "{}: {table}: '{sig}' has mean_us {} over {} runs; expected a finite time of at least 0 over at least 1 run",
            path.display(),
            m.mean_us,
            m.count
        )),
        None => Ok(()),
    }
}

/// What identifies a node's cost across graphs and runs: the op, its attributes, its operand
/// and result types, and for nodes with regions a digest of what the regions hold. A tensor
/// attribute counts by its type alone: its elements do not change the cost, and a weight
/// matrix's would make a key of megabytes.
pub fn signature(g: &Graph, n: Node) -> String {
    let nd = &g.nodes[n];
    let mut s = nd.op.name().to_string();
    let types = |vs: &[graphc_ir::Value]| vs.iter().map(|&v| g.values[v].ty.to_string()).collect::<Vec<_>>().join(", ");
    s.push_str(&format!(" ({}) -> ({})", types(&nd.operands), types(&nd.results)));
    // Names and keys differ between otherwise equal nodes; they do not change the cost.
    let attrs: Vec<String> = nd
        .attrs
        .iter()
        .filter(|(k, _)| !matches!(*k, "name" | "key" | "to" | "from" | "init"))
        .map(|(k, a)| match a {
            graphc_ir::Attr::Tensor(l) => format!("{k} = tensor {}", l.ty()),
            _ => format!("{k} = {a}"),
        })
        .collect();
    if !attrs.is_empty() {
        s.push_str(&format!(" {{{}}}", attrs.join(", ")));
    }
    if !nd.regions.is_empty() {
        let mut inner = String::new();
        for &r in &nd.regions {
            for &m in &g.regions[r].nodes {
                inner.push_str(&signature(g, m));
                inner.push(';');
            }
            inner.push('|');
        }
        s.push_str(&format!(" regions#{:016x}", fnv1a(inner.as_bytes())));
    }
    s
}

/// A stable 64-bit digest (std's hasher may change between releases; profiles outlive them).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Node and transfer times for one cluster.
#[derive(Debug)]
pub struct CostModel<'a> {
    pub cluster: &'a Cluster,
    profile: Option<&'a Profile>,
    /// Reference-CPU seconds per node, computed once (signatures are not free).
    memo: std::cell::RefCell<HashMap<(usize, Node), f64>>,
    /// The same for the profile's times on other kinds of device.
    measured: std::cell::RefCell<HashMap<(usize, Node, DeviceKind), Option<f64>>>,
}

impl<'a> CostModel<'a> {
    pub fn new(cluster: &'a Cluster, profile: Option<&'a Profile>) -> Self {
        CostModel { cluster, profile, memo: Default::default(), measured: Default::default() }
    }

    /// Seconds node `n` of `g` takes on device `d`, its regions included: as measured on a
    /// device of its kind when the profile has that, else its reference time over the
    /// device's speed.
    pub fn node_time(&self, g: &Graph, n: Node, d: usize) -> f64 {
        let device = &self.cluster.devices[d];
        if device.kind != DeviceKind::Cpu {
            if let Some(t) = self.measured_time(g, n, device.kind) {
                return t;
            }
        }
        self.reference_time(g, n) / device.speed(g.nodes[n].op.kind())
    }

    /// Seconds node `n` of `g` took on a device of kind `kind`, when the profile says.
    fn measured_time(&self, g: &Graph, n: Node, kind: DeviceKind) -> Option<f64> {
        let p = self.profile.filter(|p| p.table(kind).is_some())?;
        let key = (g as *const Graph as usize, n, kind);
        if let Some(&t) = self.measured.borrow().get(&key) {
            return t;
        }
        let t = p.seconds(kind, &signature(g, n)).map(|t| t + reference::NODE_UNMEASURED);
        self.measured.borrow_mut().insert(key, t);
        t
    }

    /// Seconds to move a value of this type from device `a` to `b` (0 on one device).
    pub fn transfer_time(&self, ty: &Type, a: usize, b: usize) -> f64 {
        if a == b {
            return 0.0;
        }
        self.cluster.link(a, b).time(type_bytes(ty))
    }

    /// The fixed cost of a step that runs `graphs` graphs concurrently.
    pub fn step_overhead(&self, graphs: usize) -> f64 {
        reference::STEP + reference::EXTRA_GRAPH * graphs.saturating_sub(1) as f64
    }

    /// Seconds on the reference CPU: measured if the profile has the node, else estimated.
    pub fn reference_time(&self, g: &Graph, n: Node) -> f64 {
        let key = (g as *const Graph as usize, n);
        if let Some(&t) = self.memo.borrow().get(&key) {
            return t;
        }
        let t = match self.profile.and_then(|p| p.seconds(DeviceKind::Cpu, &signature(g, n))) {
            Some(t) => t + reference::NODE_UNMEASURED,
            None => self.estimate(g, n),
        };
        self.memo.borrow_mut().insert(key, t);
        t
    }

    fn estimate(&self, g: &Graph, n: Node) -> f64 {
        let nd = &g.nodes[n];
        let elems = |v: graphc_ir::Value| g.values[v].ty.as_tensor().and_then(|t| t.num_elements()).unwrap_or(0) as f64;
        let out: f64 = nd.results.iter().map(|&v| elems(v)).sum();
        let input = |i: usize| nd.operands.get(i).map(|&v| elems(v)).unwrap_or(0.0);
        let region =
            |i: usize| -> f64 { g.regions[nd.regions[i]].nodes.iter().map(|&m| self.reference_time(g, m)).sum() };
        let window = || -> i64 { nd.attrs.ints("kernel").map(|k| k.iter().product()).unwrap_or(1) };
        // The op's entry says what work it does (a new op states it there); this prices it.
        let work = match nd.op.def().cost {
            Cost::Free => 0.0,
            Cost::Arithmetic => out * reference::ELEM,
            Cost::Transcendental => out * reference::ELEM_TRANSCENDENTAL,
            // libm calls on the interpreter: tanh, pow, the trigonometric ones alike.
            Cost::Libm => out * reference::ELEM_TANH_POW,
            Cost::Erf => out * reference::ELEM_ERF,
            Cost::Move => out * reference::MOVE,
            Cost::Strided => out * reference::TRANSPOSE,
            Cost::Reduction => input(0) * reference::REDUCE,
            // top_k sorts each slice: about a reduction's work per element, times the log.
            Cost::Sort => input(0) * reference::REDUCE * input(0).max(2.0).log2(),
            Cost::Softmax => input(0) * reference::SOFTMAX,
            Cost::SquaredError => input(0) * 2.0 * reference::ELEM,
            Cost::MatMul => {
                let k = g.values[nd.operands[0]].ty.as_tensor().and_then(|t| t.shape.last().copied()).unwrap_or(1);
                2.0 * out * k as f64 / reference::MATMUL_FLOPS
            }
            Cost::Conv => {
                // Each output element sums over (input channels / group) x kernel window.
                let w = g.values[nd.operands[1]].ty.as_tensor().map(|t| t.shape.clone()).unwrap_or_default();
                let per_out: u64 = w.iter().skip(1).product();
                2.0 * out * per_out as f64 / reference::CONV_FLOPS
            }
            // conv's multiply-adds, once each: per element of the gradient operand (dy), the
            // weight's (C/group) x window taps (the weight's shape an operand or the `shape` made).
            Cost::ConvInputGrad => {
                let w = g.values[nd.operands[1]].ty.as_tensor().map(|t| t.shape.clone()).unwrap_or_default();
                let per_out: u64 = w.iter().skip(1).product();
                2.0 * input(0) * per_out as f64 / reference::CONV_FLOPS
            }
            Cost::ConvFilterGrad => {
                let w: Vec<u64> = nd.attrs.ints("shape").unwrap_or_default().iter().map(|&d| d.max(0) as u64).collect();
                let per_out: u64 = w.iter().skip(1).product();
                2.0 * input(1) * per_out as f64 / reference::CONV_FLOPS
            }
            Cost::Pool => out * window() as f64 * reference::POOL,
            Cost::PoolGrad => input(0) * window() as f64 * reference::POOL,
            // A few multiply-adds per element, a square root for the adaptive ones.
            Cost::Update { ops, sqrt: false } => out * f64::from(ops) * reference::ELEM,
            Cost::Update { ops, sqrt: true } => {
                out * (f64::from(ops) * reference::ELEM + reference::ELEM_TRANSCENDENTAL)
            }
            Cost::Regions => match nd.op.def().flow {
                RegionFlow::NoRegions => 0.0,
                RegionFlow::Once => (0..nd.regions.len()).map(region).sum(),
                RegionFlow::OneOf => (0..nd.regions.len()).map(region).fold(0.0, f64::max),
                RegionFlow::Loop => ASSUMED_TRIPS * (region(0) + region(1)) + region(0),
            },
        };
        work + reference::NODE
    }
}

/// The bytes a value takes on a link: a tensor's data, nothing for tokens and handles.
pub fn type_bytes(ty: &Type) -> u64 {
    ty.as_tensor().and_then(graphc_runtime::limits::tensor_bytes).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::signature;

    #[test]
    fn a_constants_signature_is_its_type_not_its_elements() {
        let values = |k: usize| (0..1024).map(|i| format!("{}.5", (i * k) % 97)).collect::<Vec<_>>().join(", ");
        let text = format!(
            "graph @g() -> (a: f32[1024], b: f32[1024], c: f32[4]) {{\n  %a = constant {{value = dense<[{}]> : f32[1024]}} : f32[1024]\n  %b = constant {{value = dense<[{}]> : f32[1024]}} : f32[1024]\n  %c = constant {{value = dense<[1.0, 2.0, 3.0, 4.0]> : f32[4]}} : f32[4]\n  return %a, %b, %c\n}}\n",
            values(3),
            values(5)
        );
        let m = graphc_ir::parse_module(&text).unwrap();
        let g = &m.graphs[0];
        let sigs: Vec<String> = g.walk().iter().map(|&n| signature(g, n)).collect();
        assert_eq!(sigs.len(), 3);
        assert!(sigs.iter().all(|s| s.len() < 120), "{sigs:?}");
        assert_eq!(sigs[0], sigs[1], "the same type, the same cost");
        assert_ne!(sigs[0], sigs[2]);
        assert!(sigs[0].contains("value = tensor f32[1024]"), "{}", sigs[0]);
    }
}
