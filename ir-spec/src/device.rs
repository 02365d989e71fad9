//! Device specifications in TensorFlow's spelling: `/job:worker/replica:0/task:1/device:cpu:0`.
//!
//! Every component is optional (a partial spec constrains only what it names); placement fills
//! in the rest. The canonical spelling lists components in the order job, replica, task, device,
//! with the device kind in lower case.

use std::fmt;

/// The kind of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

impl DeviceKind {
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
        }
    }

    /// The kind of this [`DeviceKind::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        [DeviceKind::Cpu, DeviceKind::Gpu].into_iter().find(|k| k.name() == s)
    }

    fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "cpu" => Some(DeviceKind::Cpu),
            "gpu" => Some(DeviceKind::Gpu),
            _ => None,
        }
    }
}

/// A possibly partial device specification.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceSpec {
    pub job: Option<String>,
    pub replica: Option<u32>,
    pub task: Option<u32>,
    /// The device kind and, optionally, its index on the task.
    pub device: Option<(DeviceKind, Option<u32>)>,
}

const EXPECTED_FORM: &str = "expected a spec like '/job:worker/replica:0/task:1/device:cpu:0' \
     (every component optional, in that order) or '/cpu:0'";

impl DeviceSpec {
    /// Parses a device spec; the error says what is wrong and what is expected.
    pub fn parse(s: &str) -> Result<DeviceSpec, String> {
        let mut spec = DeviceSpec::default();
        if s.is_empty() {
            return Ok(spec);
        }
        let Some(rest) = s.strip_prefix('/') else {
            return Err(format!("device spec '{s}' must start with '/'; {EXPECTED_FORM}"));
        };
        // Order rank of each component, to reject out-of-order or repeated components.
        let mut last_rank = 0;
        for part in rest.split('/') {
            let mut fields = part.split(':');
            let key = fields.next().unwrap_or("");
            let values: Vec<&str> = fields.collect();
            let (rank, res) = match (key.to_ascii_lowercase().as_str(), values.as_slice()) {
                ("job", [name]) => (1, parse_job(name).map(|j| spec.job = Some(j))),
                ("replica", [n]) => (2, parse_index("replica", n).map(|n| spec.replica = Some(n))),
                ("task", [n]) => (3, parse_index("task", n).map(|n| spec.task = Some(n))),
                ("device", [kind]) => (4, parse_kind(kind).map(|k| spec.device = Some((k, None)))),
                ("device", [kind, n]) => (
                    4,
                    parse_kind(kind).and_then(|k| parse_index("device", n).map(|n| spec.device = Some((k, Some(n))))),
                ),
                // Legacy short form: /cpu:0, /gpu:1.
                (k, [n]) if DeviceKind::parse(k).is_some() => {
                    (4, parse_index("device", n).map(|n| spec.device = DeviceKind::parse(k).map(|k| (k, Some(n)))))
                }
                ("", []) => return Err(format!("device spec '{s}' has an empty component; {EXPECTED_FORM}")),
                (k, _) if ["job", "replica", "task", "device"].contains(&k) => {
                    return Err(format!("device spec '{s}': malformed component '{part}'; {EXPECTED_FORM}"))
                }
                _ => return Err(format!("device spec '{s}': unknown component '{part}'; {EXPECTED_FORM}")),
            };
            res.map_err(|e| format!("device spec '{s}': {e}"))?;
            if rank <= last_rank {
                return Err(format!(
                    "device spec '{s}': component '{part}' is repeated or out of order; {EXPECTED_FORM}"
                ));
            }
            last_rank = rank;
        }
        Ok(spec)
    }

    /// A short name for file and graph names: the components that differ from a local
    /// device's (`/job:localhost/replica:0/task:0`), joined by '.': `cpu1`, `worker.t1.cpu0`.
    pub fn short_name(&self) -> String {
        let mut parts = Vec::new();
        if let Some(j) = self.job.as_deref().filter(|j| *j != "localhost") {
            parts.push(j.to_string());
        }
        if let Some(r) = self.replica.filter(|&r| r != 0) {
            parts.push(format!("r{r}"));
        }
        if let Some(t) = self.task.filter(|&t| t != 0) {
            parts.push(format!("t{t}"));
        }
        match self.device {
            Some((k, Some(i))) => parts.push(format!("{}{i}", k.name())),
            Some((k, None)) => parts.push(k.name().to_string()),
            None => {}
        }
        if parts.is_empty() {
            "any".to_string()
        } else {
            parts.join(".")
        }
    }

    /// True when every component is given: a spec that names exactly one device.
    pub fn is_full(&self) -> bool {
        self.job.is_some() && self.replica.is_some() && self.task.is_some() && matches!(self.device, Some((_, Some(_))))
    }

    pub fn is_empty(&self) -> bool {
        *self == DeviceSpec::default()
    }

    /// True when every component `self` names agrees with `other`.
    pub fn is_compatible_with(&self, other: &DeviceSpec) -> bool {
        fn agree<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
        }
        agree(&self.job, &other.job)
            && agree(&self.replica, &other.replica)
            && agree(&self.task, &other.task)
            && match (self.device, other.device) {
                (Some((k1, i1)), Some((k2, i2))) => k1 == k2 && agree(&i1, &i2),
                _ => true,
            }
    }
}

fn parse_job(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!("job name '{name}' must start with a letter and hold only letters, digits, '_' and '-'"))
    }
}

fn parse_index(what: &str, n: &str) -> Result<u32, String> {
    n.parse::<u32>().map_err(|_| format!("{what} index '{n}' is not a non-negative integer"))
}

fn parse_kind(k: &str) -> Result<DeviceKind, String> {
    DeviceKind::parse(k).ok_or_else(|| format!("unknown device kind '{k}'; expected 'cpu' or 'gpu'"))
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(j) = &self.job {
            write!(f, "/job:{j}")?;
        }
        if let Some(r) = self.replica {
            write!(f, "/replica:{r}")?;
        }
        if let Some(t) = self.task {
            write!(f, "/task:{t}")?;
        }
        match self.device {
            Some((k, Some(i))) => write!(f, "/device:{}:{i}", k.name())?,
            Some((k, None)) => write!(f, "/device:{}", k.name())?,
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_partial_specs_round_trip() {
        for s in [
            "/job:worker/replica:0/task:1/device:cpu:0",
            "/job:ps",
            "/task:3",
            "/device:gpu:1",
            "/job:worker/device:gpu",
            "",
        ] {
            assert_eq!(DeviceSpec::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn legacy_and_upper_case_forms_canonicalize() {
        assert_eq!(DeviceSpec::parse("/cpu:0").unwrap().to_string(), "/device:cpu:0");
        assert_eq!(DeviceSpec::parse("/device:GPU:2").unwrap().to_string(), "/device:gpu:2");
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let cases = [
            ("job:worker", "must start with '/'"),
            ("/job:worker/job:ps", "repeated or out of order"),
            ("/task:1/job:worker", "repeated or out of order"),
            ("/device:tpu:0", "unknown device kind 'tpu'"),
            ("/task:x", "task index 'x'"),
            ("/host:1", "unknown component 'host:1'"),
            ("/job:", "job name ''"),
            ("/job:worker//task:1", "empty component"),
        ];
        for (s, want) in cases {
            let err = DeviceSpec::parse(s).unwrap_err();
            assert!(err.contains(want), "{s}: {err}");
        }
    }

    #[test]
    fn short_names_drop_local_components() {
        let short = |s: &str| DeviceSpec::parse(s).unwrap().short_name();
        assert_eq!(short("/job:localhost/replica:0/task:0/device:cpu:1"), "cpu1");
        assert_eq!(short("/job:worker/replica:0/task:1/device:gpu:0"), "worker.t1.gpu0");
        assert_eq!(short(""), "any");
    }

    #[test]
    fn compatibility() {
        let a = DeviceSpec::parse("/job:worker").unwrap();
        let b = DeviceSpec::parse("/job:worker/task:1/device:cpu:0").unwrap();
        let c = DeviceSpec::parse("/job:ps/device:cpu:0").unwrap();
        assert!(a.is_compatible_with(&b));
        assert!(!a.is_compatible_with(&c));
    }
}
