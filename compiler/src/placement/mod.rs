//! Placement and partitioning over several devices: device spec files ([`cluster`]), the cost
//! model ([`cost`]), the placement pass ([`place`]), the partitioning pass ([`partition`]) and
//! the step simulator ([`simulate`]).

pub mod cluster;
pub mod cost;
pub mod partition;
pub mod passes;
pub mod place;
pub mod simulate;
