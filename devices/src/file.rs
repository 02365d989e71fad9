//! The spec file's format: one serde struct per table (`[[device]]`, `[[link]]`,
//! `[default_link]`), unknown fields refused, and their conversion into a [`Cluster`] with
//! every value checked and every default filled in. A new table is a field of [`FileSpec`]
//! (with `#[serde(default)]` where the table is optional) and a step of
//! [`FileSpec::into_cluster`].

use crate::cluster::{Cluster, Device, Link, LOCAL_LINK, REMOTE_LINK, SPEED_CLASSES};
use graphc_ir::{DeviceKind, DeviceSpec, Op};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Reading a cluster from its file (here, beside the format, so the model knows no format).
impl Cluster {
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
        FileSpec::parse(text, json)?.into_cluster()
    }
}

/// A whole spec file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSpec {
    device: Vec<DeviceFile>,
    #[serde(default)]
    link: Vec<LinkFile>,
    default_link: Option<DefaultLinks>,
}

/// A `[[device]]` table.
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

/// A device's `memory`: a byte count, or a size with a unit (`"16GiB"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Memory {
    Bytes(u64),
    Text(String),
}

/// A `[[link]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    between: [String; 2],
    bandwidth_gbps: f64,
    latency_us: f64,
}

/// The `[default_link]` table: the links between devices that no `[[link]]` names.
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
/// (as in TensorFlow, whose FIFOQueue has CPU kernels only). Placement also asks the GPU
/// backend node by node (graphc's `gpu_runs`): whether it has a kernel depends on dtypes,
/// shapes and fusions, which a list of ops cannot say.
const GPU_UNSUPPORTED: &[Op] = &[Op::Queue, Op::Enqueue, Op::Dequeue, Op::QueueClose, Op::QueueSize];

impl FileSpec {
    /// Parses the text of a spec file, JSON or TOML; nothing is checked beyond the syntax.
    pub(crate) fn parse(text: &str, json: bool) -> Result<FileSpec, String> {
        if json {
            serde_json::from_str(text).map_err(|e| format!("invalid device spec: {e}"))
        } else {
            toml::from_str(text).map_err(|e| format!("invalid device spec: {e}"))
        }
    }

    /// Checks the file and builds its cluster: the devices in file order, then the default
    /// links, then the links the file names.
    pub(crate) fn into_cluster(self) -> Result<Cluster, String> {
        if self.device.is_empty() {
            return Err("the spec lists no device; add a [[device]] table".into());
        }
        let mut devices: Vec<Device> = Vec::new();
        for (i, d) in self.device.into_iter().enumerate() {
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
        if let Some(d) = self.default_link {
            if let Some(l) = d.local {
                cluster.local_link =
                    link_of(l.bandwidth_gbps, l.latency_us).map_err(|e| format!("default_link.local: {e}"))?;
            }
            if let Some(l) = d.remote {
                cluster.remote_link =
                    link_of(l.bandwidth_gbps, l.latency_us).map_err(|e| format!("default_link.remote: {e}"))?;
            }
        }
        for (i, l) in self.link.iter().enumerate() {
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
}
