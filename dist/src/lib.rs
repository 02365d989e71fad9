//! graphc across processes: a cluster of tasks in TensorFlow's shape ([`cluster`]), the
//! training step split between workers and parameter servers ([`split`]), the parameter
//! server's state and sync modes ([`ps`]), and the gRPC between them ([`service`], over the
//! messages and chunked tensors of [`wire`], mutual TLS in [`tls`]), and the cluster's sharded checkpoints
//! ([`checkpoint`]). The runtime knows none of this: a worker's
//! session reaches the ps tasks through the rendezvous seam
//! (`Session::set_rendezvous` with [`service::PsRendezvousFactory`]).

pub mod checkpoint;
pub mod cluster;
pub mod ps;
pub mod service;
pub mod split;
pub mod tls;
pub mod wire;

pub use cluster::{Cluster, Role, Source, TaskId};
pub use ps::{ParameterServer, PsOptions};
pub use service::{Auth, Client, Exchange, PsRendezvousFactory, Token};
pub use split::{split, PsProgram, Split};
pub use tls::Tls;
pub use wire::SyncMode;
