//! A graph laid out for running, once per session: every value gets a slot in the frame of
//! its region (one vector per region activation, indexed by slot), and every node the slots of
//! its operands, of its results and of the values that die once it has run. A step then binds
//! and finds values by index, and frees them from lists made before the first step, with no
//! hashing and no bookkeeping allocated per node.

use crate::liveness::Liveness;
use crate::value::RtValue;
use cranelift_entity::SecondaryMap;
use graphc_ir::{Graph, Node, Region, Value};

/// Where a graph's values live in their regions' frames, and what each node reads, writes
/// and frees there.
#[derive(Debug, Default)]
pub struct Layout {
    /// Each value's slot in its region's frame.
    slot: SecondaryMap<Value, u32>,
    /// Each region's frame length.
    frame_len: SecondaryMap<Region, u32>,
    nodes: SecondaryMap<Node, NodeSlots>,
}

/// One node's slots in its region's frame: what it reads and what dies once it has run.
#[derive(Clone, Debug, Default)]
pub struct NodeSlots {
    pub operands: Box<[u32]>,
    /// The values that die once the node has run: operands it reads last, results nothing
    /// reads (what [`Liveness::dead_after`] lists).
    pub dead: Box<[u32]>,
}

impl Layout {
    pub fn of(g: &Graph, liveness: &Liveness) -> Layout {
        // A value no region makes (one a pass removed, still in the arena) has no slot: it
        // reads as unbound, an error, rather than as some other value's slot.
        let mut layout = Layout { slot: SecondaryMap::with_default(u32::MAX), ..Layout::default() };
        for (r, rd) in g.regions.iter() {
            let made = rd.params.iter().chain(rd.nodes.iter().flat_map(|&n| &g.nodes[n].results));
            let mut len = 0u32;
            for &v in made {
                layout.slot[v] = len;
                len += 1;
            }
            layout.frame_len[r] = len;
        }
        for rd in g.regions.values() {
            for &n in &rd.nodes {
                let nd = &g.nodes[n];
                let slots = |vs: &[Value]| vs.iter().map(|&v| layout.slot[v]).collect();
                layout.nodes[n] = NodeSlots { operands: slots(&nd.operands), dead: slots(liveness.dead_after(n)) };
            }
        }
        layout
    }

    /// Value `v`'s slot in the frame of its region (past every frame's end for a value no
    /// region makes).
    pub fn slot(&self, v: Value) -> usize {
        self.slot[v] as usize
    }

    pub fn node(&self, n: Node) -> &NodeSlots {
        &self.nodes[n]
    }

    /// An empty frame for an activation of region `r`.
    pub fn frame(&self, r: Region) -> Frame {
        Frame { values: vec![None; self.frame_len[r] as usize] }
    }
}

/// The values bound so far in one region activation, by slot.
#[derive(Debug, Default)]
pub struct Frame {
    values: Vec<Option<RtValue>>,
}

impl Frame {
    pub fn get(&self, slot: usize) -> Option<&RtValue> {
        self.values.get(slot)?.as_ref()
    }

    pub fn contains(&self, slot: usize) -> bool {
        self.get(slot).is_some()
    }

    pub fn set(&mut self, slot: usize, r: RtValue) {
        if let Some(s) = self.values.get_mut(slot) {
            *s = Some(r);
        }
    }

    pub fn take(&mut self, slot: usize) -> Option<RtValue> {
        self.values.get_mut(slot)?.take()
    }

    /// The bound slots, in order.
    pub fn bound(&self) -> impl Iterator<Item = usize> + '_ {
        self.values.iter().enumerate().filter(|(_, v)| v.is_some()).map(|(i, _)| i)
    }
}
