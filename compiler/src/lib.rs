//! The graphc compiler: the driver (one path from a file to a session), the pass pipeline
//! (canonicalization, folding, CSE, DCE, fusion), placement and partitioning over the IR of
//! `graphc-ir`, the plans of kernels, and the backends behind one trait. The `graphc` binary is
//! the command-line front of this library.

pub mod aot;
pub mod autodiff;
pub mod backend;
pub mod dot;
pub mod driver;
pub mod lower;
pub mod passes;
pub mod placement;
pub mod trace;
