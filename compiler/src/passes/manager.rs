//! The pass manager: runs a pipeline of [`Pass`]es over a module, verifies after every pass
//! (always in debug builds, and with `verify_each`), prints the IR after the passes asked for
//! and times them. Knows no particular pass (the registry in `mod.rs` names them).

use graphc_ir::{print_module, verify_module, Diagnostic, Graph, Module};
use std::time::{Duration, Instant};

/// One rewrite of a module.
pub trait Pass {
    /// The name pipelines use.
    fn name(&self) -> &'static str;
    /// Rewrites `g` in place; returns whether anything changed. The result must verify.
    fn run(&self, g: &mut Graph) -> Result<bool, String>;
    /// Rewrites the module: each graph by [`Pass::run`], unless the pass needs the whole module.
    fn run_module(&self, m: &mut Module) -> Result<bool, PassError> {
        let mut changed = false;
        for g in &mut m.graphs {
            changed |= self.run(g).map_err(|e| format!("on @{}: {e}", g.name))?;
        }
        Ok(changed)
    }
}

/// Why a pass failed: a message, and for input errors (placement's constraints) the located
/// diagnostics a front end renders against the source.
#[derive(Clone, Debug)]
pub struct PassError {
    /// What went wrong, in the pass's words.
    pub message: String,
    pub diagnostics: Vec<Diagnostic>,
    /// The pass that failed, once the manager knows it (it heads the message shown).
    pub pass: Option<&'static str>,
}

impl From<String> for PassError {
    fn from(message: String) -> Self {
        PassError { message, diagnostics: Vec::new(), pass: None }
    }
}

impl std::fmt::Display for PassError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pass {
            // `pass 'fuse' failed on @g: ...`
            Some(pass) if self.message.starts_with("on @") => write!(f, "pass '{pass}' failed {}", self.message),
            Some(pass) => write!(f, "pass '{pass}' failed: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for PassError {}

/// When to print the IR.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum PrintAfter {
    #[default]
    Never,
    All,
    /// After the passes of these names.
    Some(Vec<String>),
}

/// Runs a pipeline over every graph of a module.
pub struct PassManager {
    pub passes: Vec<Box<dyn Pass>>,
    /// Verify after every pass (always on in debug builds).
    pub verify_each: bool,
    pub print_after: PrintAfter,
}

impl std::fmt::Debug for PassManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.passes.iter().map(|p| p.name()).collect();
        f.debug_struct("PassManager").field("passes", &names).field("verify_each", &self.verify_each).finish()
    }
}

/// How long one pass took over the whole module.
#[derive(Clone, Debug)]
pub struct Timing {
    pub pass: &'static str,
    pub time: Duration,
    pub changed: bool,
}

impl PassManager {
    /// A manager of these passes, verifying only in debug builds and printing nothing.
    pub fn of(passes: Vec<Box<dyn Pass>>) -> Self {
        PassManager { passes, verify_each: false, print_after: PrintAfter::Never }
    }

    /// Runs every pass on every graph, in order. `dump` receives the module text after each
    /// pass that `print_after` selects, headed by a comment naming the pass (so a dump is
    /// itself valid IR).
    pub fn run(&self, m: &mut Module, dump: &mut dyn FnMut(&str)) -> Result<Vec<Timing>, PassError> {
        let mut timings = Vec::new();
        for pass in &self.passes {
            let start = Instant::now();
            let changed = pass.run_module(m).map_err(|mut e| {
                e.pass = Some(pass.name());
                e
            })?;
            timings.push(Timing { pass: pass.name(), time: start.elapsed(), changed });
            if self.verify_each || cfg!(debug_assertions) {
                let diags = verify_module(m);
                if let Some(d) = diags.first() {
                    return Err(PassError::from(format!(
                        "pass '{}' produced invalid IR ({} problems); first: {}",
                        pass.name(),
                        diags.len(),
                        d.message
                    )));
                }
            }
            let print = match &self.print_after {
                PrintAfter::Never => false,
                PrintAfter::All => true,
                PrintAfter::Some(names) => names.iter().any(|n| n == pass.name()),
            };
            if print {
                dump(&format!("// ----- IR after {} -----\n{}", pass.name(), print_module(m)));
            }
        }
        Ok(timings)
    }
}

/// A per-pass timing table, like `mlir-opt --mlir-timing`.
pub fn timing_table(timings: &[Timing]) -> String {
    let total: Duration = timings.iter().map(|t| t.time).sum();
    let mut s = String::from("  time (ms)   share  pass\n");
    for t in timings {
        let share = if total.is_zero() { 0.0 } else { 100.0 * t.time.as_secs_f64() / total.as_secs_f64() };
        s.push_str(&format!("{:>11.3}  {:>5.1}%  {}\n", t.time.as_secs_f64() * 1e3, share, t.pass));
    }
    s.push_str(&format!("{:>11.3}  100.0%  total\n", total.as_secs_f64() * 1e3));
    s
}
