//! The graphc compiler: the pass pipeline (canonicalization, folding, CSE, DCE, fusion) over
//! the IR of `graphc-ir`, and, with later issues, the backends. The `graphc` binary is the
//! command-line front of this library.

pub mod backend;
pub mod dot;
pub mod driver;
pub mod lower;
pub mod passes;
pub mod placement;
pub mod trace;
