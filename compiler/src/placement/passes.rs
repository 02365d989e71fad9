//! Placement and partitioning as passes of the pass manager: the way every subcommand reaches
//! them (`graphc opt --passes place,partition`, and the driver for `run`, `bench`, `simulate`
//! and `dot`).

use super::cluster::Cluster;
use super::cost::{CostModel, Profile};
use super::partition::{partition_module, Partitioned};
use super::place::place_for;
use crate::backend::{default_backend, Backend};
use crate::passes::manager::{Pass, PassError};
use graphc_ir::{Diagnostic, Graph, Module};
use std::sync::{Arc, Mutex};

/// What the passes need beyond the module: the devices to place on, measured node times and
/// the backend to compile for; and what partitioning found, for the driver to build requests
/// from.
#[derive(Clone, Debug)]
pub struct PassContext {
    pub cluster: Cluster,
    pub profile: Option<Profile>,
    /// The backend the module is compiled for: what fusion groups and what placement gives
    /// each kind of device are its answers ([`Backend::fuses`], [`Backend::accepts`]).
    pub backend: &'static dyn Backend,
    /// Each original graph's partitions, from the last partition pass run with this context
    /// (shared between the context's clones, so the pass's copy fills the caller's).
    pub partitions: Arc<Mutex<Vec<Partitioned>>>,
    /// Warnings of the passes run with this context (shared like `partitions`), for the
    /// driver to show.
    pub warnings: Arc<Mutex<Vec<Diagnostic>>>,
}

impl PassContext {
    pub fn new(cluster: Cluster, profile: Option<Profile>) -> Self {
        PassContext {
            cluster,
            profile,
            backend: default_backend(),
            partitions: Arc::default(),
            warnings: Arc::default(),
        }
    }

    /// This context, asking `backend` instead of the default one.
    pub fn with_backend(mut self, backend: &'static dyn Backend) -> Self {
        self.backend = backend;
        self
    }

    pub fn warn(&self, warnings: Vec<Diagnostic>) {
        self.warnings.lock().unwrap_or_else(|p| p.into_inner()).extend(warnings);
    }

    /// The warnings passes gave since the last call.
    pub fn take_warnings(&self) -> Vec<Diagnostic> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// What the last partition pass made of each graph.
    pub fn partitions(&self) -> Vec<Partitioned> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Default for PassContext {
    fn default() -> Self {
        PassContext::new(Cluster::single_cpu(), None)
    }
}

/// The placement pass over [`PassContext`]'s cluster. Its errors carry their located
/// diagnostics.
pub(crate) struct Place(pub PassContext);

impl Pass for Place {
    fn name(&self) -> &'static str {
        "place"
    }
    fn run(&self, _: &mut Graph) -> Result<bool, String> {
        Err("place works on whole modules".into())
    }
    fn run_module(&self, m: &mut Module) -> Result<bool, PassError> {
        let cost = CostModel::new(&self.0.cluster, self.0.profile.as_ref());
        place_for(m, &cost, self.0.backend).map_err(|d| PassError {
            message: d.flat_message(),
            diagnostics: vec![d],
            pass: None,
        })
    }
}

/// The partitioning pass; records what it made in the context.
pub(crate) struct Partition(pub PassContext);

impl Pass for Partition {
    fn name(&self) -> &'static str {
        "partition"
    }
    fn run(&self, _: &mut Graph) -> Result<bool, String> {
        Err("partition works on whole modules".into())
    }
    fn run_module(&self, m: &mut Module) -> Result<bool, PassError> {
        let parts = partition_module(m)?;
        let changed = parts.iter().any(|p| p.parts.len() > 1);
        *self.0.partitions.lock().unwrap_or_else(|p| p.into_inner()) = parts;
        Ok(changed)
    }
}
