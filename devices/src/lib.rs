//! Device spec files: the devices a module may be placed on, how fast each is per op class,
//! how much memory it has, and the links between them (ir-spec/SPEC.md §13). TOML or JSON,
//! chosen by the file's extension; without a file, one CPU device.
//!
//! A crate of its own, below the compiler, so that whatever reads a spec (the compiler's
//! placement, a process that runs one task of the cluster) reads the same format the same
//! way. [`Cluster`] is the model the readers use; the file format, its validation and its
//! defaults are in the private `file` module, one serde struct per table of the file.

mod cluster;
mod file;

pub use cluster::{Cluster, Device, Link, LOCAL_LINK, REMOTE_LINK, SPEED_CLASSES};
