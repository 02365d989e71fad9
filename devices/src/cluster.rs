//! The model a spec file describes: [`Cluster`] of [`Device`]s joined by [`Link`]s, and the
//! queries placement asks of it.

use graphc_ir::{DeviceKind, DeviceSpec, Op, OpKind};
use std::collections::HashMap;

/// The op classes a device's `speed` table may name, after the IR's op kinds.
pub const SPEED_CLASSES: &[&str] =
    &["default", "elementwise", "injective", "reduction", "contraction", "source", "stateful", "control", "opaque"];

/// The entry of a device's `speed` table that applies to ops of this kind. Every kind is
/// listed, so a kind added to the IR must be given a class here (and in [`SPEED_CLASSES`]).
fn speed_class(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Elementwise
        | OpKind::Injective
        | OpKind::Reduction
        | OpKind::Contraction
        | OpKind::Source
        | OpKind::Stateful
        | OpKind::Control
        | OpKind::Opaque => kind.name(),
        OpKind::Communication => "default",
    }
}

/// One device.
#[derive(Clone, Debug)]
pub struct Device {
    /// The short name (partition graphs are `@"GRAPH@NAME"`).
    pub name: String,
    /// The full spec that annotations are matched against.
    pub spec: DeviceSpec,
    pub kind: DeviceKind,
    /// Memory for tensors that live on the device (variables, constants), in bytes.
    pub memory: u64,
    /// Speed relative to the reference CPU, per op class; `default` for classes not listed.
    pub(crate) speed: HashMap<String, f64>,
    /// Ops the device has no kernel for.
    pub unsupported: Vec<Op>,
}

impl Device {
    /// The speed factor for ops of this kind (1.0 is the reference CPU).
    pub fn speed(&self, kind: OpKind) -> f64 {
        let class = speed_class(kind);
        self.speed.get(class).or_else(|| self.speed.get("default")).copied().unwrap_or(1.0)
    }

    pub fn supports(&self, op: Op) -> bool {
        !self.unsupported.contains(&op)
    }
}

/// A link between two devices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// Bytes per second.
    pub bandwidth: f64,
    /// Seconds before the first byte arrives.
    pub latency: f64,
}

impl Link {
    /// Seconds to move `bytes` over the link.
    pub fn time(&self, bytes: u64) -> f64 {
        self.latency + bytes as f64 / self.bandwidth
    }
}

/// Devices on one task share memory: a copy at memory speed.
pub const LOCAL_LINK: Link = Link { bandwidth: 10e9, latency: 2e-6 };
/// Devices on different tasks talk over a network: 10 Gbit/s Ethernet.
pub const REMOTE_LINK: Link = Link { bandwidth: 1.25e9, latency: 50e-6 };

/// The devices and links a module is placed on.
#[derive(Clone, Debug)]
pub struct Cluster {
    pub devices: Vec<Device>,
    /// The links the file names, both ways.
    pub(crate) links: HashMap<(usize, usize), Link>,
    /// For pairs on one task that no `[[link]]` names.
    pub(crate) local_link: Link,
    /// For pairs on different tasks that no `[[link]]` names.
    pub(crate) remote_link: Link,
}

impl Cluster {
    /// One CPU, `/job:localhost/replica:0/task:0/device:cpu:0`, with the host's memory.
    pub fn single_cpu() -> Cluster {
        let spec = DeviceSpec::parse("/job:localhost/replica:0/task:0/device:cpu:0").expect("a valid spec");
        Cluster {
            devices: vec![Device {
                name: spec.short_name(),
                spec,
                kind: DeviceKind::Cpu,
                memory: graphc_runtime::limits::default_max_tensor_bytes(),
                speed: HashMap::new(),
                unsupported: Vec::new(),
            }],
            links: HashMap::new(),
            local_link: LOCAL_LINK,
            remote_link: REMOTE_LINK,
        }
    }

    /// A device by name or by spec (full or the short form `/cpu:1`).
    pub fn find_device(&self, name: &str) -> Result<usize, String> {
        if let Some(i) = self.devices.iter().position(|d| d.name == name) {
            return Ok(i);
        }
        if let Ok(spec) = DeviceSpec::parse(name) {
            let hits: Vec<usize> = self.matching(&spec).collect();
            if let [i] = hits.as_slice() {
                return Ok(*i);
            }
        }
        Err(format!("no device named '{name}'; the devices are {}", self.listing()))
    }

    /// The devices an annotation (full or partial) admits.
    pub fn matching<'a>(&'a self, spec: &'a DeviceSpec) -> impl Iterator<Item = usize> + 'a {
        self.devices.iter().enumerate().filter(move |(_, d)| spec.is_compatible_with(&d.spec)).map(|(i, _)| i)
    }

    /// `name (spec)` for every device, for messages.
    pub fn listing(&self) -> String {
        self.devices.iter().map(|d| format!("{} ({})", d.name, d.spec)).collect::<Vec<_>>().join(", ")
    }

    /// The link from device `a` to device `b`.
    pub fn link(&self, a: usize, b: usize) -> Link {
        if let Some(l) = self.links.get(&(a, b)) {
            return *l;
        }
        let (sa, sb) = (&self.devices[a].spec, &self.devices[b].spec);
        if (&sa.job, sa.replica, sa.task) == (&sb.job, sb.replica, sb.task) {
            self.local_link
        } else {
            self.remote_link
        }
    }

    /// The device holding a full spec, if any.
    pub fn device_of(&self, spec: &DeviceSpec) -> Option<usize> {
        self.devices.iter().position(|d| &d.spec == spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_kind_has_a_speed_class() {
        let kinds = Op::ALL.iter().map(|op| op.kind());
        for class in kinds.map(speed_class) {
            assert!(SPEED_CLASSES.contains(&class), "{class}");
        }
    }

    #[test]
    fn toml_and_json_agree() {
        let toml = r#"
            [[device]]
            spec = "/cpu:0"
            [[device]]
            spec = "/device:gpu:0"
            memory = "8GiB"
            speed = { default = 4.0, contraction = 20.0 }
            [[link]]
            between = ["cpu0", "gpu0"]
            bandwidth_gbps = 2.0
            latency_us = 20.0
        "#;
        let json = r#"{"device": [{"spec": "/cpu:0"}, {"spec": "/device:gpu:0", "memory": "8GiB",
            "speed": {"default": 4.0, "contraction": 20.0}}],
            "link": [{"between": ["cpu0", "gpu0"], "bandwidth_gbps": 2.0, "latency_us": 20.0}]}"#;
        for c in [Cluster::parse(toml, false).unwrap(), Cluster::parse(json, true).unwrap()] {
            assert_eq!(c.devices.len(), 2);
            assert_eq!(c.devices[1].spec.to_string(), "/job:localhost/replica:0/task:0/device:gpu:0");
            assert_eq!(c.devices[1].speed(OpKind::Contraction), 20.0);
            assert_eq!(c.devices[1].speed(OpKind::Elementwise), 4.0);
            assert!(!c.devices[1].supports(Op::Enqueue));
            assert_eq!(c.link(0, 1), Link { bandwidth: 2e9, latency: 20e-6 });
        }
    }

    #[test]
    fn mistakes_say_what_is_wrong() {
        let cases = [
            ("", "missing field `device`"),
            ("[[device]]\nspec = \"/cpu:0\"\nspeed = { warp = 2.0 }", "unknown op class 'warp'"),
            ("[[device]]\nspec = \"/cpu:0\"\nspeed = { default = -1.0 }", "positive number"),
            ("[[device]]\nspec = \"/device:cpu\"", "kind and index"),
            ("[[device]]\nspec = \"/cpu:0\"\n[[device]]\nspec = \"/cpu:0\"", "repeats device"),
            ("[[device]]\nspec = \"/cpu:0\"\nunsupported = [\"matmull\"]", "did you mean 'matmul'"),
            ("[[device]]\nspec = \"/cpu:0\"\nkind = \"gpu\"", "disagrees"),
            ("[[device]]\nspec = \"/tpu:0\"", "unknown component"),
            (
                "[[device]]\nspec = \"/cpu:0\"\n[[link]]\nbetween = [\"cpu0\", \"gpu9\"]\nbandwidth_gbps = 1.0\nlatency_us = 1.0",
                "no device named 'gpu9'",
            ),
            ("[[device]]\nspec = \"/cpu:0\"\ncolour = 3", "unknown field `colour`"),
        ];
        for (text, want) in cases {
            let err = Cluster::parse(text, false).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
