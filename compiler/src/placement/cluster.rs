//! Device spec files: the devices a module may be placed on, how fast each is per op class,
//! how much memory it has, and the links between them (ir-spec/SPEC.md §13). TOML or JSON,
//! chosen by the file's extension; without a file, one CPU device.

use graphc_ir::{DeviceKind, DeviceSpec, Op, OpKind};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The op classes a device's `speed` table may name, after the IR's op kinds.
pub const SPEED_CLASSES: &[&str] =
    &["default", "elementwise", "injective", "reduction", "contraction", "source", "stateful", "control", "opaque"];

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
    speed: HashMap<String, f64>,
    /// Ops the device has no kernel for.
    pub unsupported: Vec<Op>,
}

impl Device {
    /// The speed factor for ops of this kind (1.0 is the reference CPU).
    pub fn speed(&self, kind: OpKind) -> f64 {
        let class = match kind {
            OpKind::Communication => "default",
            k => k.name(),
        };
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
    links: HashMap<(usize, usize), Link>,
    /// For pairs on one task that no `[[link]]` names.
    local_link: Link,
    /// For pairs on different tasks that no `[[link]]` names.
    remote_link: Link,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    device: Vec<DeviceFile>,
    #[serde(default)]
    link: Vec<LinkFile>,
    default_link: Option<DefaultLinks>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceFile {
    spec: String,
    name: Option<String>,
    kind: Option<String>,
    memory: Option<Memory>,
    #[serde(default)]
    speed: BTreeMap<String, f64>,
    unsupported: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Memory {
    Bytes(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    between: [String; 2],
    bandwidth_gbps: f64,
    latency_us: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultLinks {
    local: Option<LinkParams>,
    remote: Option<LinkParams>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkParams {
    bandwidth_gbps: f64,
    latency_us: f64,
}

/// The ops a GPU has no kernel for unless its spec says otherwise: queues live in host memory
/// (as in TensorFlow, whose FIFOQueue has CPU kernels only).
const GPU_UNSUPPORTED: &[Op] = &[Op::Queue, Op::Enqueue, Op::Dequeue, Op::QueueClose, Op::QueueSize];

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

    /// Reads a spec file: `.json` as JSON, anything else as TOML.
    pub fn load(path: &Path) -> Result<Cluster, String> {
        let bytes = graphc_runtime::fsutil::read_regular(path, "a device spec (TOML or JSON)")
            .map_err(|e| e.replacen("cannot read ", "cannot read device spec ", 1))?;
        let text = String::from_utf8(bytes).map_err(|_| format!("device spec {} is not UTF-8 text", path.display()))?;
        let json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
        Cluster::parse(&text, json).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses the text of a spec file.
    pub fn parse(text: &str, json: bool) -> Result<Cluster, String> {
        let file: FileSpec = if json {
            serde_json::from_str(text).map_err(|e| format!("invalid device spec: {e}"))?
        } else {
            toml::from_str(text).map_err(|e| format!("invalid device spec: {e}"))?
        };
        Cluster::from_file(file)
    }

    fn from_file(file: FileSpec) -> Result<Cluster, String> {
        if file.device.is_empty() {
            return Err("the spec lists no device; add a [[device]] table".into());
        }
        let mut devices: Vec<Device> = Vec::new();
        for (i, d) in file.device.into_iter().enumerate() {
            let at = format!("device {} ('{}')", i + 1, d.spec);
            let device = d.into_device().map_err(|e| format!("{at}: {e}"))?;
            if let Some(other) = devices.iter().find(|o| o.spec == device.spec || o.name == device.name) {
                return Err(format!(
                    "{at}: the spec or the name '{}' repeats device '{}' ({})",
                    device.name, other.name, other.spec
                ));
            }
            devices.push(device);
        }
        let mut cluster = Cluster { devices, links: HashMap::new(), local_link: LOCAL_LINK, remote_link: REMOTE_LINK };
        if let Some(d) = file.default_link {
            if let Some(l) = d.local {
                cluster.local_link =
                    link_of(l.bandwidth_gbps, l.latency_us).map_err(|e| format!("default_link.local: {e}"))?;
            }
            if let Some(l) = d.remote {
                cluster.remote_link =
                    link_of(l.bandwidth_gbps, l.latency_us).map_err(|e| format!("default_link.remote: {e}"))?;
            }
        }
        for (i, l) in file.link.iter().enumerate() {
            let at = format!("link {} ({} - {})", i + 1, l.between[0], l.between[1]);
            let a = cluster.find_device(&l.between[0]).map_err(|e| format!("{at}: {e}"))?;
            let b = cluster.find_device(&l.between[1]).map_err(|e| format!("{at}: {e}"))?;
            if a == b {
                return Err(format!("{at}: a link joins two different devices"));
            }
            let link = link_of(l.bandwidth_gbps, l.latency_us).map_err(|e| format!("{at}: {e}"))?;
            cluster.links.insert((a, b), link);
            cluster.links.insert((b, a), link);
        }
        Ok(cluster)
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

impl DeviceFile {
    fn into_device(self) -> Result<Device, String> {
        let mut spec = DeviceSpec::parse(&self.spec)?;
        // A spec file may leave out the local job, replica and task.
        spec.job.get_or_insert_with(|| "localhost".into());
        spec.replica.get_or_insert(0);
        spec.task.get_or_insert(0);
        let kind = match spec.device {
            Some((kind, Some(_))) => kind,
            _ => return Err("the spec must name the device kind and index, like '/device:cpu:0'".into()),
        };
        if let Some(k) = &self.kind {
            if !k.eq_ignore_ascii_case(kind.name()) {
                return Err(format!("kind '{k}' disagrees with the spec, which says '{}'", kind.name()));
            }
        }
        let memory = match self.memory {
            None => graphc_runtime::limits::default_max_tensor_bytes(),
            Some(Memory::Bytes(b)) => b,
            Some(Memory::Text(t)) => parse_bytes(&t)?,
        };
        if memory == 0 {
            return Err("memory must be more than 0 bytes".into());
        }
        for (class, &v) in &self.speed {
            if !SPEED_CLASSES.contains(&class.as_str()) {
                return Err(format!("speed: unknown op class '{class}'; the classes are {}", SPEED_CLASSES.join(", ")));
            }
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("speed.{class} = {v}: a speed is a positive number (1.0 = the reference CPU)"));
            }
        }
        let unsupported = match self.unsupported {
            None if kind == DeviceKind::Gpu => GPU_UNSUPPORTED.to_vec(),
            None => Vec::new(),
            Some(names) => names
                .iter()
                .map(|n| {
                    Op::from_name(n).ok_or_else(|| {
                        let hint = graphc_ir::suggest::closest(n, Op::ALL.iter().map(|o| o.name()))
                            .map(|s| format!("; did you mean '{s}'?"))
                            .unwrap_or_default();
                        format!("unsupported: unknown op '{n}'{hint}")
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Device {
            name: self.name.unwrap_or_else(|| spec.short_name()),
            spec,
            kind,
            memory,
            speed: self.speed.into_iter().collect(),
            unsupported,
        })
    }
}

fn link_of(bandwidth_gbps: f64, latency_us: f64) -> Result<Link, String> {
    if !(bandwidth_gbps.is_finite() && bandwidth_gbps > 0.0) {
        return Err(format!("bandwidth_gbps = {bandwidth_gbps}: must be a positive number of GB/s"));
    }
    if !(latency_us.is_finite() && latency_us >= 0.0) {
        return Err(format!("latency_us = {latency_us}: must be a non-negative number of microseconds"));
    }
    Ok(Link { bandwidth: bandwidth_gbps * 1e9, latency: latency_us / 1e6 })
}

/// `"16GiB"`, `"512 MB"`, `"1024"`: a byte count with an optional unit.
fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    if num.is_empty() {
        return Err(format!("memory '{text}' is not a size like \"16GiB\" or 1073741824"));
    }
    let scale: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024f64.powi(2),
        "gib" => 1024f64.powi(3),
        "tib" => 1024f64.powi(4),
        _ => {
            return Err(format!("memory '{text}': unknown unit '{unit}'; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"))
        }
    };
    let n: f64 = num.parse().map_err(|_| format!("memory '{text}' is not a size like \"16GiB\" or 1073741824"))?;
    let bytes = n * scale;
    if !(bytes.is_finite() && bytes < u64::MAX as f64) {
        return Err(format!("memory '{text}' is too large"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_bytes("16GiB").unwrap(), 16 << 30);
        assert_eq!(parse_bytes("512 MB").unwrap(), 512_000_000);
        assert_eq!(parse_bytes("1024").unwrap(), 1024);
        assert!(parse_bytes("3 parsecs").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("lots").unwrap_err().contains("not a size"));
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
