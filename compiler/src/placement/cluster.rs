//! Device spec files: the devices a module may be placed on, how fast each is per op class,
//! how much memory it has, and the links between them (ir-spec/SPEC.md §13). The format and
//! its reader are crate `graphc-devices` (devices/), which the compiler and whatever runs
//! beside it share; re-exported here for the compiler's placement.

pub use graphc_devices::{Cluster, Device, Link, LOCAL_LINK, REMOTE_LINK, SPEED_CLASSES};
