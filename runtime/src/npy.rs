//! Tensors to and from `.npy` files (numpy's format). Reading parses the header strictly
//! and checks the declared size against the file before allocating anything (a few bytes that
//! claim a huge shape, or a device that never ends, must be an error, not an abort or a hang);
//! writing puts the same header before the tensor's little-endian bytes.

use crate::fsutil::{open_regular, write_atomically};
use crate::tensor::Tensor;
use graphc_ir::DType;
use graphc_ir::TensorData;
use graphc_ir::{bf16, f16};
use std::io::{Read, Write};
use std::path::Path;

/// numpy itself refuses headers over 10000 bytes unless told otherwise; anything this large is
/// not a header.
const MAX_HEADER_BYTES: u64 = 1 << 16;

/// Reads a `.npy` file of any dtype graphc has, either byte order, C or Fortran order. numpy
/// has no bfloat16: a file of 2-byte raw elements (`<V2`, what numpy writes for ml_dtypes'
/// bfloat16 arrays) is read as bf16. The error is one line naming the file and what is wrong with it.
pub fn read_npy(path: &Path) -> Result<Tensor, String> {
    NpyFile::open(path)?.read()
}

/// A `.npy` file whose header is read and checked against the file's length, its data not
/// yet: what it holds ([`NpyFile::ty`], [`NpyFile::bytes`]) can be checked against what the
/// reader wants and has room for before anything is allocated for it.
#[derive(Debug)]
pub struct NpyFile {
    file: std::fs::File,
    path: std::path::PathBuf,
    header: Header,
    dtype: Dtype,
    count: usize,
    bytes: u64,
}

impl NpyFile {
    pub fn open(path: &Path) -> Result<NpyFile, String> {
        let (mut file, len) = open_regular(path, "a .npy file")?;
        let invalid = |why: String| format!("{} is not a valid .npy file: {why}", path.display());
        let header = read_header(&mut file, len).map_err(invalid)?;
        let dtype = Dtype::parse(&header.descr).ok_or_else(|| {
            format!(
                "{} holds elements of numpy type '{}', which graphc has no dtype for (it reads float16/32/64, int8/16/32/64, uint8/16/32/64, bool and bfloat16 as V2)",
                path.display(),
                header.descr
            )
        })?;
        let count = header.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        let need = count.and_then(|c| c.checked_mul(dtype.size as u64));
        let (Some(count), Some(need)) = (count, need) else {
            return Err(invalid("the declared shape has more elements than memory can address".into()));
        };
        let have = len - header.data_start;
        if need != have {
            let more = if have > need { format!(", {} more than that", have - need) } else { String::new() };
            return Err(invalid(format!(
                "the header declares {count} elements ({need} bytes) but the file holds {have} bytes of data{more}"
            )));
        }
        let max = crate::limits::default_max_tensor_bytes();
        if need > max {
            return Err(format!(
                "{} holds {need} bytes of data, more than the {max} bytes a tensor may take",
                path.display()
            ));
        }
        let count = usize::try_from(count).map_err(|_| invalid("the declared shape is too large".into()))?;
        Ok(NpyFile { file, path: path.to_path_buf(), header, dtype, count, bytes: need })
    }

    /// The tensor type the file holds, as its header declares it.
    pub fn ty(&self) -> graphc_ir::TensorType {
        graphc_ir::TensorType::new(self.dtype.dtype, self.header.shape.iter().map(|&d| d as u64).collect::<Vec<u64>>())
    }

    /// The bytes of its data: what the tensor read from it takes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Reads the data, in blocks, into a tensor.
    pub fn read(mut self) -> Result<Tensor, String> {
        let path = &self.path;
        let invalid = |why: String| format!("{} is not a valid .npy file: {why}", path.display());
        let data = read_data(&mut self.file, self.dtype, self.count).map_err(&invalid)?;
        let header = &self.header;
        let tensor = if header.fortran_order {
            // Fortran order lists the first axis fastest: read it as the reversed shape, then
            // transpose back into graphc's row-major layout.
            let reversed: Vec<usize> = header.shape.iter().rev().copied().collect();
            let t =
                Tensor::from_data(&reversed, data).ok_or_else(|| invalid("the data does not fill the shape".into()))?;
            crate::map_dtype!(t, a => a.reversed_axes().as_standard_layout().into_owned())
        } else {
            Tensor::from_data(&header.shape, data).ok_or_else(|| invalid("the data does not fill the shape".into()))?
        };
        Ok(tensor)
    }
}

/// What a `.npy` header says.
#[derive(Debug, PartialEq)]
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
    /// Where the data starts: after the magic, version, length and header.
    data_start: u64,
}

/// Reads and parses the header of a file `len` bytes long.
fn read_header(f: &mut impl Read, len: u64) -> Result<Header, String> {
    let mut prefix = [0u8; 8];
    read_exact(f, &mut prefix, "its first 8 bytes")?;
    if &prefix[..6] != b"\x93NUMPY" {
        return Err("it does not start with the .npy magic string".into());
    }
    let (major, minor) = (prefix[6], prefix[7]);
    let header_len = match major {
        1 => {
            let mut b = [0u8; 2];
            read_exact(f, &mut b, "the header length")?;
            u16::from_le_bytes(b) as u64
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            read_exact(f, &mut b, "the header length")?;
            u32::from_le_bytes(b) as u64
        }
        _ => return Err(format!("format version {major}.{minor} is not supported")),
    };
    let start = if major == 1 { 10 } else { 12 };
    if header_len > MAX_HEADER_BYTES {
        return Err(format!(
            "the header length is {header_len} bytes, more than the {MAX_HEADER_BYTES} a header may take"
        ));
    }
    if start + header_len > len {
        return Err(format!(
            "the header length is {header_len} bytes but the file ends {} bytes after it starts",
            len.saturating_sub(start)
        ));
    }
    let mut text = vec![0u8; header_len as usize];
    read_exact(f, &mut text, "the header")?;
    // Versions 1 and 2 are latin-1 (in practice ASCII); 3 is UTF-8.
    let text = match major {
        3 => String::from_utf8(text).map_err(|_| "the header is not UTF-8".to_string())?,
        _ if text.is_ascii() => String::from_utf8(text).expect("ASCII is UTF-8"),
        _ => return Err("the header is not ASCII".into()),
    };
    let mut h = parse_header(&text)?;
    h.data_start = start + header_len;
    Ok(h)
}

fn read_exact(f: &mut impl Read, buf: &mut [u8], what: &str) -> Result<(), String> {
    f.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => format!("the file ends within {what}"),
        _ => format!("cannot read {what}: {e}"),
    })
}

/// Parses the header text: exactly the keys `descr`, `fortran_order` and `shape`, once each,
/// as the Python dict literal numpy writes (`{'descr': '<f4', 'fortran_order': False,
/// 'shape': (2, 3), }`), followed by nothing but spaces and a newline.
fn parse_header(text: &str) -> Result<Header, String> {
    let mut p = DictParser { s: text.as_bytes(), at: 0 };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    p.expect(b'{')?;
    loop {
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.expect(b':')?;
        let dup = match key.as_str() {
            "descr" => descr.replace(p.string()?).is_some(),
            "fortran_order" => fortran.replace(p.boolean()?).is_some(),
            "shape" => shape.replace(p.tuple()?).is_some(),
            other => return Err(format!("the header has an unknown key '{other}'")),
        };
        if dup {
            return Err(format!("the header gives '{key}' twice"));
        }
        if !p.eat(b',') {
            p.expect(b'}')?;
            break;
        }
    }
    let rest = &text[p.at..];
    if !rest.trim_end_matches(' ').trim_end_matches('\n').trim_end_matches(' ').is_empty() {
        return Err(format!("the header has {:?} after its closing brace", rest.trim()));
    }
    let missing = |k: &str| format!("the header has no '{k}'");
    Ok(Header {
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran_order: fortran.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
        data_start: 0,
    })
}

/// A cursor over the header's Python literal; only the forms numpy writes.
struct DictParser<'a> {
    s: &'a [u8],
    at: usize,
}

impl DictParser<'_> {
    fn skip_space(&mut self) {
        while self.s.get(self.at).is_some_and(|c| *c == b' ') {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip_space();
        let hit = self.s.get(self.at) == Some(&c);
        self.at += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("the header is malformed: expected '{}' at byte {}", c as char, self.at))
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.skip_space();
        let quote = match self.s.get(self.at) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("the header is malformed: expected a string at byte {}", self.at)),
        };
        let start = self.at + 1;
        let len = self.s[start..]
            .iter()
            .position(|&c| c == quote)
            .ok_or_else(|| "the header is malformed: a string does not end".to_string())?;
        self.at = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }

    fn boolean(&mut self) -> Result<bool, String> {
        self.skip_space();
        for (word, v) in [("True", true), ("False", false)] {
            if self.s[self.at..].starts_with(word.as_bytes()) {
                self.at += word.len();
                return Ok(v);
            }
        }
        Err(format!("the header is malformed: 'fortran_order' is not True or False at byte {}", self.at))
    }

    /// A tuple of non-negative integers: `()`, `(3,)`, `(2, 3)`.
    fn tuple(&mut self) -> Result<Vec<usize>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            if self.eat(b')') {
                return Ok(dims);
            }
            self.skip_space();
            let digits = self.s[self.at..].iter().take_while(|c| c.is_ascii_digit()).count();
            let text = std::str::from_utf8(&self.s[self.at..self.at + digits]).unwrap_or_default();
            let d: usize = text
                .parse()
                .map_err(|_| format!("the header is malformed: expected a dimension at byte {}", self.at))?;
            self.at += digits;
            dims.push(d);
            if !self.eat(b',') {
                self.expect(b')')?;
                // `(3)` is the integer 3 in Python, not a tuple.
                if dims.len() == 1 {
                    return Err("the header is malformed: a one-element shape needs a trailing comma".into());
                }
                return Ok(dims);
            }
        }
    }
}

/// An element type graphc reads, and its byte order.
#[derive(Clone, Copy, Debug)]
struct Dtype {
    dtype: DType,
    size: usize,
    big_endian: bool,
}

/// numpy's type code of each dtype (bf16 as ml_dtypes' arrays are saved: raw 2-byte elements).
const CODES: [(&str, DType); 13] = [
    ("f4", DType::F32),
    ("f8", DType::F64),
    ("f2", DType::F16),
    ("V2", DType::BF16),
    ("i1", DType::I8),
    ("i2", DType::I16),
    ("i4", DType::I32),
    ("i8", DType::I64),
    ("u1", DType::U8),
    ("u2", DType::U16),
    ("u4", DType::U32),
    ("u8", DType::U64),
    ("b1", DType::Bool),
];

impl Dtype {
    fn parse(descr: &str) -> Option<Dtype> {
        let (order, code) = match descr.as_bytes().first()? {
            c @ (b'<' | b'>' | b'|' | b'=') => (*c, &descr[1..]),
            _ => (b'=', descr),
        };
        let code = if code == "?" { "b1" } else { code };
        let dtype = CODES.iter().find(|(c, _)| *c == code)?.1;
        let size = dtype.size_bytes();
        // '|' means "byte order does not apply": only for one-byte types.
        if order == b'|' && size != 1 {
            return None;
        }
        let big_endian = order == b'>' || (order == b'=' && cfg!(target_endian = "big"));
        Some(Dtype { dtype, size, big_endian })
    }
}

/// Reads `count` elements, converting a block at a time so the file's bytes are never held
/// twice over; the element vector's room is reserved fallibly.
fn read_data(f: &mut impl Read, dt: Dtype, count: usize) -> Result<TensorData, String> {
    fn elems<const N: usize, T>(
        f: &mut impl Read,
        count: usize,
        convert: impl Fn([u8; N]) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let mut out: Vec<T> = Vec::new();
        out.try_reserve_exact(count).map_err(|_| format!("cannot allocate room for {count} elements"))?;
        let mut block = vec![0u8; (1 << 16) * N];
        let mut left = count;
        while left > 0 {
            let n = left.min(1 << 16);
            read_exact(f, &mut block[..n * N], "the data")?;
            for c in block[..n * N].chunks_exact(N) {
                out.push(convert(c.try_into().expect("chunks_exact gives N bytes"))?);
            }
            left -= n;
        }
        Ok(out)
    }
    macro_rules! num {
        ($t:ty, $n:literal) => {
            elems::<$n, $t>(f, count, |b| {
                Ok(if dt.big_endian { <$t>::from_be_bytes(b) } else { <$t>::from_le_bytes(b) })
            })
        };
    }
    Ok(match dt.dtype {
        DType::F32 => TensorData::F32(num!(f32, 4)?),
        DType::F64 => TensorData::F64(num!(f64, 8)?),
        DType::F16 => TensorData::F16(num!(f16, 2)?),
        DType::BF16 => TensorData::BF16(num!(bf16, 2)?),
        DType::I8 => TensorData::I8(num!(i8, 1)?),
        DType::I16 => TensorData::I16(num!(i16, 2)?),
        DType::I32 => TensorData::I32(num!(i32, 4)?),
        DType::I64 => TensorData::I64(num!(i64, 8)?),
        DType::U8 => TensorData::U8(num!(u8, 1)?),
        DType::U16 => TensorData::U16(num!(u16, 2)?),
        DType::U32 => TensorData::U32(num!(u32, 4)?),
        DType::U64 => TensorData::U64(num!(u64, 8)?),
        DType::Bool => TensorData::Bool(elems::<1, bool>(f, count, |[b]| match b {
            0 | 1 => Ok(b == 1),
            _ => Err(format!("a bool element is the byte {b}, neither 0 nor 1")),
        })?),
    })
}

/// Writes a tensor as a `.npy` file (format 1.0, little-endian, C order), atomically.
pub fn write_npy(path: &Path, t: &Tensor) -> Result<(), String> {
    write_atomically(path, |f| {
        let mut w = std::io::BufWriter::new(f);
        w.write_all(&npy_header(t))?;
        w.write_all(&t.to_le_bytes())?;
        w.flush()
    })
    .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The magic, version, length and header dict of a tensor's file, padded with spaces and a
/// newline to a multiple of 64 bytes, as numpy writes it.
fn npy_header(t: &Tensor) -> Vec<u8> {
    let code = CODES.iter().find(|(_, d)| *d == t.dtype()).expect("every dtype has a code").0;
    let order = if t.dtype().size_bytes() == 1 { '|' } else { '<' };
    let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{order}{code}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}
