//! (being written)

use super::entry::OpEntry;

pub(super) const OPS: &[OpEntry] = &[];
