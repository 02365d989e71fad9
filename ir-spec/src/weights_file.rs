//! Weights files: safetensors files beside a `.gir` whose tensors literals name
//! (`safetensors<"m.weights.safetensors", "fc.weight"> : f32[2560,4096]`, SPEC section 6).
//!
//! Opening a file reads and checks its header only: every tensor's name (each once), dtype,
//! shape and byte range, the ranges following one another to the end of the file. A tensor's
//! elements are read when someone asks for them, with positioned reads straight into the
//! vector that holds them (one copy from the page cache, no buffer between), and are not kept
//! here: the runtime's tensor takes that vector, so a model's weights are in memory once.
//!
//! Why reads and not a memory map: every consumer wants the elements in memory of its own (the
//! runtime's tensors own their buffers), so a map would save no copy and no memory; and a
//! mapped file that another process truncates kills the reader with SIGBUS, where a read
//! returns an error. The file stays open from the parse on, so a file replaced by rename (as
//! graphc's writers replace files) is still the one whose header was checked; one truncated
//! in place gives "changed since it was opened", never a crash.

use crate::elements::TensorData;
use crate::types::{DType, TensorType};
use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest header read (the safetensors crate's limit too).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The safetensors dtype of each IR dtype (little-endian; a BOOL is one byte, 0 or 1).
pub const DTYPES: [(DType, &str); 13] = [
    (DType::F32, "F32"),
    (DType::F64, "F64"),
    (DType::F16, "F16"),
    (DType::BF16, "BF16"),
    (DType::I8, "I8"),
    (DType::I16, "I16"),
    (DType::I32, "I32"),
    (DType::I64, "I64"),
    (DType::U8, "U8"),
    (DType::U16, "U16"),
    (DType::U32, "U32"),
    (DType::U64, "U64"),
    (DType::Bool, "BOOL"),
];

fn st_name(d: DType) -> &'static str {
    DTYPES.iter().find(|(g, _)| *g == d).map_or("?", |(_, s)| s)
}

/// Checks a weights file's path as a literal writes it: relative to the module's directory
/// and inside it, so a `.gir` can name no file but those beside or below it. Components are
/// separated by `/`; none may be empty, `.` or `..`, and none may hold a backslash or NUL
/// (which name other things on other systems). A symlink in the directory is followed: the
/// directory's owner put it there, as they could have put the file.
pub fn check_path(written: &str) -> Result<(), String> {
    let rule = "a weights file is named relative to the .gir's directory, inside it";
    if written.is_empty() {
        return Err(format!("is an empty path; {rule}"));
    }
    if written.starts_with('/') {
        return Err(format!("is an absolute path; {rule}"));
    }
    for c in written.split('/') {
        let why = match c {
            "" => "an empty component ('//' or a trailing '/')",
            "." => "a '.' component",
            ".." => "a '..' component, which leaves the directory",
            c if c.contains('\\') => "a backslash",
            c if c.contains('\0') => "a NUL character",
            _ => continue,
        };
        return Err(format!("has {why}; {rule}, its components separated by '/'"));
    }
    Ok(())
}

/// An open weights file whose header has been checked.
pub struct WeightsFile {
    /// The path as the text writes it.
    written: String,
    /// The path resolved against the module's directory.
    path: PathBuf,
    file: File,
    /// Device and inode: two references to one tensor name the same file and tensor.
    id: (u64, u64),
    tensors: HashMap<String, Stored>,
}

impl fmt::Debug for WeightsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WeightsFile({:?}, {} tensors)", self.path, self.tensors.len())
    }
}

/// Where a tensor is: its type and the file offset of its first byte.
#[derive(Clone, Debug)]
struct Stored {
    ty: TensorType,
    start: u64,
}

/// One entry of the header as JSON has it.
#[derive(Deserialize)]
struct RawInfo {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// The header's entries in order, `__metadata__` left out; a name given twice is an error
/// (JSON readers keep one of them silently, and which one is theirs to choose).
struct RawHeader(Vec<(String, RawInfo)>);

impl<'de> Deserialize<'de> for RawHeader {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = RawHeader;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object of tensors")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
                let mut out: Vec<(String, RawInfo)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(A::Error::custom(format!("it holds \"{key}\" twice")));
                    }
                    if key == "__metadata__" {
                        map.next_value::<HashMap<String, String>>()
                            .map_err(|e| A::Error::custom(format!("__metadata__: {e}")))?;
                        continue;
                    }
                    let value: serde_json::Value = map.next_value()?;
                    let info =
                        RawInfo::deserialize(value).map_err(|e| A::Error::custom(format!("tensor \"{key}\": {e}")))?;
                    out.push((key, info));
                }
                Ok(RawHeader(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

impl WeightsFile {
    /// Opens `written` (checked by [`check_path`]) in `dir` and checks its header. The error
    /// says what is wrong, to follow `weights file "PATH" ` in a diagnostic (as [`check_path`]'s).
    pub fn open(dir: &Path, written: &str) -> Result<Arc<WeightsFile>, String> {
        check_path(written)?;
        let path = dir.join(written);
        let unreadable = |e: io::Error| format!("cannot be read ({}): {e}", path.display());
        let meta = std::fs::metadata(&path).map_err(unreadable)?;
        if !meta.is_file() {
            return Err(format!("is {}, not a regular file ({})", file_kind(meta.file_type()), path.display()));
        }
        // Not waiting on a FIFO put there since the check; what was opened is checked again.
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&path).map_err(unreadable)?;
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            return Err(format!("is {}, not a regular file ({})", file_kind(meta.file_type()), path.display()));
        }
        let tensors = read_header(&file, meta.len()).map_err(|e| format!("is not a valid safetensors file: {e}"))?;
        Ok(Arc::new(WeightsFile { written: written.to_string(), path, file, id: (meta.dev(), meta.ino()), tensors }))
    }

    /// The path as the text writes it.
    pub fn written(&self) -> &str {
        &self.written
    }

    /// The path resolved against the module's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The names of the tensors, in no order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The tensor `name`, or `None` when the file has none of that name.
    pub fn tensor(self: &Arc<Self>, name: &str) -> Option<External> {
        let s = self.tensors.get(name)?;
        Some(External { file: self.clone(), name: name.to_string(), ty: s.ty.clone(), start: s.start })
    }
}

/// Reads and checks the header of a file of `len` bytes: the tensors by name.
fn read_header(file: &File, len: u64) -> Result<HashMap<String, Stored>, String> {
    let mut n = [0u8; 8];
    if len < 8 {
        return Err(format!("it is {len} bytes long, too short for the 8-byte length of its header"));
    }
    file.read_exact_at(&mut n, 0).map_err(|e| e.to_string())?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_BYTES {
        return Err(format!("its header length is {n} bytes, more than the {MAX_HEADER_BYTES} graphc reads"));
    }
    if n > len - 8 {
        return Err(format!("its header length is {n} bytes, but only {} follow (a truncated file?)", len - 8));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact_at(&mut header, 8).map_err(|e| e.to_string())?;
    let text = std::str::from_utf8(&header).map_err(|e| format!("its header is not UTF-8: {e}"))?;
    let RawHeader(mut entries) =
        serde_json::from_str(text).map_err(|e| format!("its header is not a safetensors header: {e}"))?;
    // The data follows the header, each tensor right after the one before (no gaps, no
    // overlap), to the end of the file.
    let data_start = 8 + n;
    let data_len = len - data_start;
    entries.sort_by_key(|(_, e)| e.data_offsets);
    let mut at = 0u64;
    let mut tensors = HashMap::with_capacity(entries.len());
    for (name, e) in entries {
        let Some(&(dtype, _)) = DTYPES.iter().find(|(_, s)| *s == e.dtype) else {
            let known: Vec<&str> = DTYPES.iter().map(|(_, s)| *s).collect();
            return Err(format!(
                "tensor \"{name}\" has dtype \"{}\", which graphc has no dtype for (it reads {})",
                e.dtype,
                known.join(", ")
            ));
        };
        let [start, end] = e.data_offsets;
        if start != at || end < start {
            return Err(format!(
                "tensor \"{name}\" takes bytes {start}..{end} of the data, where bytes from {at} on were expected \
                 (tensors follow one another, with no gap or overlap)"
            ));
        }
        let ty = TensorType::new(dtype, e.shape);
        let bytes = ty.num_elements().and_then(|k| k.checked_mul(dtype.size_bytes() as u64));
        if bytes != Some(end - start) {
            return Err(format!(
                "tensor \"{name}\" takes {} bytes of the data, but {ty} takes {}",
                end - start,
                bytes.map_or("more than 2^64".into(), |b| b.to_string())
            ));
        }
        at = end;
        tensors.insert(name, Stored { ty, start: data_start + start });
    }
    if at != data_len {
        let what = if at > data_len { "a truncated file?" } else { "bytes that no tensor takes" };
        return Err(format!(
            "its tensors take {at} bytes of data, but the file holds {data_len} after the header ({what})"
        ));
    }
    Ok(tensors)
}

/// "a directory", "a FIFO", ... for messages (`graphc_runtime::fsutil` says it so too).
pub fn file_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_file() {
        "a regular file"
    } else {
        "something other than a file"
    }
}

/// A tensor of a weights file, as a literal refers to it.
#[derive(Clone)]
pub struct External {
    file: Arc<WeightsFile>,
    name: String,
    ty: TensorType,
    start: u64,
}

impl fmt::Debug for External {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "External({:?}, {:?}, {})", self.file.written, self.name, self.ty)
    }
}

impl External {
    /// The file's path as the text writes it.
    pub fn path(&self) -> &str {
        &self.file.written
    }

    /// The file's path, resolved.
    pub fn file(&self) -> &Path {
        &self.file.path
    }

    /// The tensor's name in the file.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tensor's type as the file has it.
    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    /// Whether both name the same tensor of the same file (by device and inode, however the
    /// path was written).
    pub fn same_tensor(&self, other: &External) -> bool {
        self.file.id == other.file.id && self.name == other.name
    }

    /// Elements `range` in row-major order, read from the file.
    pub fn read(&self, range: Range<u64>) -> Result<TensorData, String> {
        let n = self.ty.num_elements().unwrap_or(0);
        if range.start > range.end || range.end > n {
            return Err(format!("elements {range:?} are not within the {n} of tensor \"{}\"", self.name));
        }
        let size = self.ty.dtype.size_bytes() as u64;
        let at = self.start + range.start * size;
        let count = usize::try_from(range.end - range.start).map_err(|_| self.too_large())?;
        let f = &self.file.file;
        let failed = |e: io::Error| {
            let why = if e.kind() == io::ErrorKind::UnexpectedEof {
                "the file is shorter than when it was opened (it changed meanwhile)".to_string()
            } else {
                e.to_string()
            };
            format!("cannot read tensor \"{}\" of weights file {}: {why}", self.name, self.file.path.display())
        };
        Ok(match self.ty.dtype {
            DType::F32 => TensorData::F32(self.read_le(f, at, count).map_err(failed)?),
            DType::F64 => TensorData::F64(self.read_le(f, at, count).map_err(failed)?),
            DType::F16 => TensorData::F16(self.read_le(f, at, count).map_err(failed)?),
            DType::BF16 => TensorData::BF16(self.read_le(f, at, count).map_err(failed)?),
            DType::I8 => TensorData::I8(self.read_le(f, at, count).map_err(failed)?),
            DType::I16 => TensorData::I16(self.read_le(f, at, count).map_err(failed)?),
            DType::I32 => TensorData::I32(self.read_le(f, at, count).map_err(failed)?),
            DType::I64 => TensorData::I64(self.read_le(f, at, count).map_err(failed)?),
            DType::U8 => TensorData::U8(self.read_le(f, at, count).map_err(failed)?),
            DType::U16 => TensorData::U16(self.read_le(f, at, count).map_err(failed)?),
            DType::U32 => TensorData::U32(self.read_le(f, at, count).map_err(failed)?),
            DType::U64 => TensorData::U64(self.read_le(f, at, count).map_err(failed)?),
            DType::Bool => {
                let bytes: Vec<u8> = self.read_le(f, at, count).map_err(failed)?;
                if let Some(i) = bytes.iter().position(|&b| b > 1) {
                    return Err(format!(
                        "tensor \"{}\" of weights file {} holds the byte {} at element {}, where a BOOL is 0 or 1",
                        self.name,
                        self.file.path.display(),
                        bytes[i],
                        range.start + i as u64
                    ));
                }
                TensorData::Bool(bytes.into_iter().map(|b| b == 1).collect())
            }
        })
    }

    fn too_large(&self) -> String {
        format!("tensor \"{}\" ({}) is too large to read", self.name, self.ty)
    }

    /// `count` elements of `T` from byte `at`, little-endian, read into their own vector
    /// (allocated fallibly: a huge tensor is an error, not an abort).
    fn read_le<T: bytemuck::Pod>(&self, f: &File, at: u64, count: usize) -> io::Result<Vec<T>> {
        let mut v: Vec<T> = Vec::new();
        v.try_reserve_exact(count).map_err(|_| io::Error::other(self.too_large()))?;
        v.resize(count, T::zeroed());
        f.read_exact_at(bytemuck::cast_slice_mut(&mut v), at)?;
        if cfg!(target_endian = "big") {
            v.iter_mut().for_each(|x| bytemuck::bytes_of_mut(x).reverse());
        }
        Ok(v)
    }
}

/// Equality of the tensor referred to ([`External::same_tensor`]).
impl PartialEq for External {
    fn eq(&self, other: &External) -> bool {
        self.same_tensor(other)
    }
}

impl Eq for External {}

impl Hash for External {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (self.file.id, &self.name).hash(h)
    }
}

/// Writes a safetensors file of `tensors` (name and type, in this order) to `out`: the header
/// (padded with spaces so the data starts 8-byte aligned), then each tensor's elements in
/// little-endian bytes, which `elements(i)` gives for tensor `i` when its turn comes (so a
/// tensor read from another file is in memory alone).
pub fn write<'a>(
    out: &mut impl Write,
    tensors: &[(&str, &TensorType)],
    mut elements: impl FnMut(usize) -> Result<Cow<'a, TensorData>, String>,
) -> io::Result<()> {
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    for (name, ty) in tensors {
        let bytes = ty.num_elements().and_then(|k| k.checked_mul(ty.dtype.size_bytes() as u64));
        let bytes = bytes.ok_or_else(|| io::Error::other(format!("tensor \"{name}\" ({ty}) is too large")))?;
        let entry =
            serde_json::json!({ "dtype": st_name(ty.dtype), "shape": ty.shape, "data_offsets": [at, at + bytes] });
        // `__metadata__` is the header's own field, not a tensor.
        if header.insert(name.to_string(), entry).is_some() || *name == "__metadata__" {
            return Err(io::Error::other(format!("the tensor name \"{name}\" is taken (a graphc bug)")));
        }
        at += bytes;
    }
    let mut text = serde_json::Value::Object(header).to_string();
    text.push_str(&" ".repeat((8 - text.len() % 8) % 8));
    out.write_all(&(text.len() as u64).to_le_bytes())?;
    out.write_all(text.as_bytes())?;
    for (i, (name, ty)) in tensors.iter().enumerate() {
        let data = elements(i).map_err(io::Error::other)?;
        if Some(data.len() as u64) != ty.num_elements() || data.dtype() != ty.dtype {
            return Err(io::Error::other(format!(
                "tensor \"{name}\" has {} {} elements for {ty}",
                data.len(),
                data.dtype()
            )));
        }
        write_le(out, &data)?;
    }
    Ok(())
}

/// The elements' little-endian bytes, written without a copy where the host is little-endian.
fn write_le(out: &mut impl Write, data: &TensorData) -> io::Result<()> {
    fn pod<T: bytemuck::Pod>(out: &mut impl Write, v: &[T]) -> io::Result<()> {
        if cfg!(target_endian = "little") {
            return out.write_all(bytemuck::cast_slice(v));
        }
        for chunk in v.chunks(1 << 13) {
            let mut c = chunk.to_vec();
            c.iter_mut().for_each(|x| bytemuck::bytes_of_mut(x).reverse());
            out.write_all(bytemuck::cast_slice(&c))?;
        }
        Ok(())
    }
    match data {
        TensorData::F32(v) => pod(out, v),
        TensorData::F64(v) => pod(out, v),
        TensorData::F16(v) => pod(out, v),
        TensorData::BF16(v) => pod(out, v),
        TensorData::I8(v) => pod(out, v),
        TensorData::I16(v) => pod(out, v),
        TensorData::I32(v) => pod(out, v),
        TensorData::I64(v) => pod(out, v),
        TensorData::U8(v) => pod(out, v),
        TensorData::U16(v) => pod(out, v),
        TensorData::U32(v) => pod(out, v),
        TensorData::U64(v) => pod(out, v),
        TensorData::Bool(v) => {
            for chunk in v.chunks(1 << 16) {
                out.write_all(&chunk.iter().map(|&b| u8::from(b)).collect::<Vec<u8>>())?;
            }
            Ok(())
        }
    }
}
