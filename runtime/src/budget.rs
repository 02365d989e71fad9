//! The session's memory budget: the bytes of tensors its runs hold, checked before every
//! allocation the runtime makes (kernel outputs, queue contents), so that a graph whose live
//! values outgrow memory fails with an error naming the node instead of being killed or
//! aborting when an allocation fails.
//!
//! The budget defaults to what the process may still use: the least of the address space
//! RLIMIT_AS leaves, the cgroup's memory limit less its usage, and the machine's MemAvailable.
//! `GRAPHC_MEMORY_LIMIT` or [`crate::SessionOptions::memory_limit`] overrides it.
//!
//! Each run keeps a [`Ledger`] of the tensors it holds (by buffer, so a tensor bound to several
//! values counts once) and adds to and takes from the session's counter as they come and go;
//! a ledger gives back whatever it still holds when the run ends, however it ends. Two graphs
//! of one step that hold the same tensor (a send and its recv) count it twice: the budget errs
//! on the safe side.

use crate::error::{ErrorKind, RunError};
use crate::limits::human;
use crate::tensor::Tensor;
use graphc_ir::{Graph, Value};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The environment variable that overrides the default budget (`2GiB`, `512MiB`, bytes).
pub const MEMORY_LIMIT_ENV: &str = "GRAPHC_MEMORY_LIMIT";

/// A session-wide count of live tensor bytes against a limit.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    live: AtomicU64,
}

impl MemoryBudget {
    pub fn new(limit: u64) -> Self {
        MemoryBudget { limit, live: AtomicU64::new(0) }
    }

    /// `limit` when given (`--memory-limit`), else [`MemoryBudget::from_environment`].
    pub fn resolve(limit: Option<u64>) -> Result<Self, RunError> {
        match limit {
            Some(limit) => Ok(Self::new(limit)),
            None => Self::from_environment(),
        }
    }

    /// The budget from the process's limits, or from `GRAPHC_MEMORY_LIMIT` when it is set.
    pub fn from_environment() -> Result<Self, RunError> {
        match std::env::var(MEMORY_LIMIT_ENV) {
            Ok(s) => parse_bytes(&s).map(Self::new).map_err(|m| RunError::invalid(format!("{MEMORY_LIMIT_ENV}: {m}"))),
            Err(_) => Ok(Self::new(default_limit())),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held now by the session's runs and queues.
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// Whether `bytes` more fit; the error says how much is live.
    pub fn check(&self, bytes: u64, what: &str) -> Result<(), String> {
        let live = self.live();
        if live.checked_add(bytes).is_some_and(|t| t <= self.limit) {
            return Ok(());
        }
        Err(format!(
            "{what}: {} more would exceed the session's memory budget of {} ({} is live)",
            human(bytes),
            human(self.limit),
            human(live)
        ))
    }

    /// Counts `bytes` more if they fit (atomically: concurrent runs cannot both slip under).
    pub fn try_charge(&self, bytes: u64, what: &str) -> Result<(), String> {
        self.live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| {
                live.checked_add(bytes).filter(|&t| t <= self.limit)
            })
            .map(|_| ())
            .map_err(|_| self.check(bytes, what).err().unwrap_or_else(|| format!("{what} exceeds the memory budget")))
    }

    /// Counts `bytes` that are already allocated.
    fn charge(&self, bytes: u64) {
        self.live.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn refund(&self, bytes: u64) {
        // Saturating: a queue may hand out items enqueued before the budget counted them.
        let _ = self.live.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |live| Some(live.saturating_sub(bytes)));
    }
}

/// The bytes a tensor's elements take.
pub fn bytes_of(t: &Tensor) -> u64 {
    (t.len() as u64).saturating_mul(t.dtype().size_bytes() as u64)
}

/// The tensors one run holds, each once, with a name for messages.
#[derive(Debug)]
pub(crate) struct Ledger {
    budget: Arc<MemoryBudget>,
    /// By the address of the tensor (only compared: it is held while it is recorded).
    held: FxHashMap<usize, Held>,
}

#[derive(Debug)]
struct Held {
    bytes: u64,
    /// How many bindings hold it.
    count: u32,
    /// The value it was first bound to, named only in messages.
    value: Value,
}

impl Ledger {
    pub fn new(budget: Arc<MemoryBudget>) -> Self {
        Ledger { budget, held: FxHashMap::default() }
    }

    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Records one more binding of `t`, to `value`.
    pub fn hold(&mut self, t: &Arc<Tensor>, value: Value) {
        let h = self.held.entry(Arc::as_ptr(t) as usize).or_insert_with(|| {
            let bytes = bytes_of(t);
            self.budget.charge(bytes);
            Held { bytes, count: 0, value }
        });
        h.count += 1;
    }

    /// Drops one binding of `t`; its bytes leave the count with the last.
    pub fn release(&mut self, t: &Arc<Tensor>) {
        let p = Arc::as_ptr(t) as usize;
        if let Some(h) = self.held.get_mut(&p) {
            h.count -= 1;
            if h.count == 0 {
                let bytes = h.bytes;
                self.held.remove(&p);
                self.budget.refund(bytes);
            }
        }
    }

    /// Whether a node's results of `bytes` fit, as an error naming what this run holds (values
    /// of `g`).
    pub fn check(&self, bytes: u64, g: &Graph) -> Result<(), RunError> {
        self.budget.check(bytes, "the node's results").map_err(|m| {
            let mut held: Vec<&Held> = self.held.values().collect();
            held.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.value.cmp(&b.value)));
            let name = |v: Value| g.values[v].name.as_deref().map_or_else(|| format!("{v}"), |n| format!("%{n}"));
            let largest: Vec<String> =
                held.iter().take(4).map(|h| format!("{} ({})", name(h.value), human(h.bytes))).collect();
            let mut msg =
                format!("{m} (this run holds {} tensor{}", held.len(), if held.len() == 1 { "" } else { "s" });
            if !largest.is_empty() {
                msg.push_str(&format!("; largest: {}", largest.join(", ")));
            }
            msg.push(')');
            let mine = self.held.values().map(|h| h.bytes).fold(0u64, u64::saturating_add);
            let others = self.budget.live().saturating_sub(mine);
            if others > 0 {
                msg.push_str(&format!("; queues and other runs hold {}", human(others)));
            }
            msg.push_str(&format!("; raise the budget with {MEMORY_LIMIT_ENV} or --memory-limit"));
            RunError::new(ErrorKind::ResourceExhausted, msg)
        })
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        let bytes: u64 = self.held.values().map(|h| h.bytes).sum();
        self.budget.refund(bytes);
    }
}

/// Whether the variables' initial values fit the budget together: they are built when the
/// session is made, before any run could count them.
pub fn check_variables(m: &graphc_ir::Module, budget: &MemoryBudget) -> Result<(), RunError> {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    for g in &m.graphs {
        for n in g.walk() {
            let nd = &g.nodes[n];
            if nd.op != graphc_ir::Op::Variable || !seen.insert(nd.attrs.str("name").unwrap_or_default()) {
                continue;
            }
            if let Some(init) = nd.attrs.tensor("init") {
                total = total.saturating_add(crate::limits::tensor_bytes(init.ty()).unwrap_or(u64::MAX));
            }
        }
    }
    budget.check(total, "the variables' initial values").map_err(|m| {
        RunError::new(
            ErrorKind::ResourceExhausted,
            format!("{m}; raise the budget with {MEMORY_LIMIT_ENV} or --memory-limit"),
        )
    })
}

/// What this process may still allocate: the least of the address space RLIMIT_AS leaves,
/// the cgroup's limit less its usage (v2, else v1) and MemAvailable; 16 GiB when none is
/// known.
pub fn default_limit() -> u64 {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let number = |s: Option<String>| s.and_then(|s| s.trim().parse::<u64>().ok());
    let mut limits = Vec::new();
    if let Some(cap) = read("/proc/self/limits").and_then(|s| address_space_limit(&s)) {
        let used = read("/proc/self/status").and_then(|s| status_kib(&s, "VmSize:")).unwrap_or(0);
        limits.push(cap.saturating_sub(used));
    }
    for (max, current) in [
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ] {
        if let Some(max) = number(read(max)) {
            limits.push(max.saturating_sub(number(read(current)).unwrap_or(0)));
            break;
        }
    }
    if let Some(avail) = read("/proc/meminfo").and_then(|s| status_kib(&s, "MemAvailable:")) {
        limits.push(avail);
    }
    limits.into_iter().min().unwrap_or(16 << 30)
}

/// The soft RLIMIT_AS from /proc/self/limits, `None` when unlimited.
fn address_space_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..].split_whitespace().next()?.parse().ok()
}

/// A `NAME: N kB` line of /proc/self/status or /proc/meminfo, in bytes.
fn status_kib(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    line[name.len()..].split_whitespace().next()?.parse::<u64>().ok()?.checked_mul(1024)
}

/// A size: bytes, or a number with K, M, G, T (powers of 1024, with or without `iB`/`B`).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("expected a size such as 512MiB or 2GiB, got '{s}'")),
    };
    let n: f64 = num.parse().map_err(|_| format!("expected a size such as 512MiB or 2GiB, got '{s}'"))?;
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("the size '{s}' is too large"));
    }
    // Under a byte (0, 0.1) would refuse every tensor, surely not what was meant.
    if bytes < 1.0 {
        return Err(format!("expected a size of at least one byte, got '{s}'"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_bytes("1.5 M").unwrap(), 3 << 19);
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("0.1").is_err() && parse_bytes("0").is_err());
        assert!(parse_bytes("9999999999T").is_err());
    }

    #[test]
    fn proc_files_parse() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         1073741824           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(1 << 30));
        assert_eq!(address_space_limit("Max address space         unlimited            unlimited  bytes"), None);
        assert_eq!(status_kib("VmSize:\t    3892 kB\n", "VmSize:"), Some(3892 * 1024));
        assert!(default_limit() > 0);
    }

    #[test]
    fn a_ledger_counts_each_tensor_once_and_gives_back_what_it_holds() {
        let m = graphc_ir::parse_module(
            "graph @g(%a: f32[10]) -> (b: f32[10]) {\n  %b = neg %a : f32[10]\n  return %b\n}\n",
        )
        .unwrap();
        let g = &m.graphs[0];
        let (a, b) = (g.inputs()[0], g.output_values()[0]);
        let budget = Arc::new(MemoryBudget::new(100));
        let t = Arc::new(Tensor::zeros(&graphc_ir::TensorType::new(graphc_ir::DType::F32, [10])).unwrap());
        let mut l = Ledger::new(budget.clone());
        l.hold(&t, a);
        l.hold(&t, b);
        assert_eq!(budget.live(), 40);
        l.release(&t);
        assert_eq!(budget.live(), 40);
        let e = l.check(61, g).unwrap_err();
        assert!(e.message.contains("%a (40 bytes)"), "{e}");
        assert!(l.check(60, g).is_ok());
        drop(l);
        assert_eq!(budget.live(), 0);
        assert!(budget.try_charge(100, "x").is_ok());
        assert!(budget.try_charge(1, "enqueue").unwrap_err().contains("enqueue: 1 bytes more would exceed"));
    }
}
