//! `.npy` input: strict headers, sizes checked against the file before allocating, only
//! regular files; every broken file is a one-line error, never an abort or a hang.

use graphc_ir::{bf16, f16, TensorData};
use graphc_runtime::npy::{read_npy, write_npy};
use graphc_runtime::Tensor;
use std::path::{Path, PathBuf};

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("graphc-npy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A version 1 file with this header text (padded as numpy pads it) and data.
fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    let padded = format!("{header:<117}\n");
    bytes.extend((padded.len() as u16).to_le_bytes());
    bytes.extend(padded.as_bytes());
    bytes.extend(data);
    bytes
}

fn read_bytes(dir: &Path, name: &str, bytes: &[u8]) -> Result<Tensor, String> {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    read_npy(&p)
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn every_dtype_round_trips() {
    let dir = tempdir("round");
    let tensors = [
        Tensor::from_data(&[2, 3], TensorData::F32(vec![1.0, -0.0, f32::NAN, f32::INFINITY, 5.0, 6.0])).unwrap(),
        Tensor::from_data(&[3], TensorData::F64(vec![1.0, f64::NEG_INFINITY, 3.0])).unwrap(),
        Tensor::from_data(&[], TensorData::I32(vec![-7])).unwrap(),
        Tensor::from_data(&[2, 0], TensorData::I64(vec![])).unwrap(),
        Tensor::from_data(&[2], TensorData::Bool(vec![true, false])).unwrap(),
        Tensor::from_data(&[3], TensorData::F16(vec![f16::from_f32(0.1), f16::NAN, f16::NEG_ZERO])).unwrap(),
        Tensor::from_data(&[1, 2], TensorData::BF16(vec![bf16::from_f32(3.5), bf16::INFINITY])).unwrap(),
        Tensor::from_data(&[2], TensorData::I8(vec![-128, 127])).unwrap(),
        Tensor::from_data(&[2], TensorData::I16(vec![-300, 300])).unwrap(),
        Tensor::from_data(&[2], TensorData::U8(vec![0, 255])).unwrap(),
        Tensor::from_data(&[1], TensorData::U16(vec![65535])).unwrap(),
        Tensor::from_data(&[1], TensorData::U32(vec![u32::MAX])).unwrap(),
        Tensor::from_data(&[2], TensorData::U64(vec![u64::MAX, 1])).unwrap(),
    ];
    for (i, t) in tensors.iter().enumerate() {
        let p = dir.join(format!("{i}.npy"));
        write_npy(&p, t).unwrap();
        let back = read_npy(&p).unwrap();
        assert_eq!(back.ty(), t.ty());
        // numpy's layout: the data starts on a 64-byte boundary, after a newline.
        let bytes = std::fs::read(&p).unwrap();
        let start = bytes.len() - t.len() * t.dtype().size_bytes();
        assert!(start.is_multiple_of(64) && bytes[start - 1] == b'\n', "{t}: data at {start}");
        assert_eq!(format!("{back:?}"), format!("{t:?}"), "bit for bit, NaN included");
    }
}

#[test]
fn fortran_order_and_big_endian_files_are_read_in_graphc_layout() {
    let dir = tempdir("layout");
    // [[1, 2, 3], [4, 5, 6]] stored column by column.
    let t = read_bytes(
        &dir,
        "f.npy",
        &npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", &f32s(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0])),
    )
    .unwrap();
    assert_eq!(t, Tensor::from_data(&[2, 3], TensorData::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])).unwrap());
    let be: Vec<u8> = [1i32, -2].iter().flat_map(|x| x.to_be_bytes()).collect();
    let t = read_bytes(&dir, "be.npy", &npy("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", &be)).unwrap();
    assert_eq!(t, Tensor::from_data(&[2], TensorData::I32(vec![1, -2])).unwrap());
}

#[test]
fn malformed_headers_are_one_line_errors_before_any_allocation() {
    let dir = tempdir("headers");
    let six = f32s(&[0.0; 6]);
    let cases: &[(&str, &[u8], &str)] = &[
        // The reviewer's file: a second 'shape' that a lenient reader would take, 12 GB.
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (3000000000,), }",
            &six,
            "gives 'shape' twice",
        ),
        ("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (6,), }", &six, "gives 'descr' twice"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1, }", &six, "unknown key 'extra'"),
        ("{'descr': '<f4', 'shape': (6,), }", &six, "has no 'fortran_order'"),
        ("{'descr': '<f4', 'fortran_order': False, }", &six, "has no 'shape'"),
        ("{'fortran_order': False, 'shape': (6,), }", &six, "has no 'descr'"),
        ("{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }", &six, "not True or False"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), } junk", &six, "after its closing brace"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", &six, "trailing comma"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", &six, "expected a dimension"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, }", &six, "malformed"),
        ("{'descr': '|f4', 'fortran_order': False, 'shape': (6,), }", &six, "numpy type '|f4'"),
        ("{'descr': '<c8', 'fortran_order': False, 'shape': (6,), }", &six, "numpy type '<c8'"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", &six, "holds 24 bytes of data, 4 more"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }", &six, "declares 7 elements (28 bytes)"),
        (
            "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
            &six,
            "more elements than memory can address",
        ),
        ("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", &[1, 2], "neither 0 nor 1"),
    ];
    for (i, (header, data, want)) in cases.iter().enumerate() {
        let e = read_bytes(&dir, &format!("{i}.npy"), &npy(header, data)).unwrap_err();
        assert!(e.contains(want) && !e.contains('\n'), "{header}: {e}");
    }
}

#[test]
fn huge_or_lying_header_lengths_are_refused() {
    let dir = tempdir("lengths");
    // Version 2: a four-byte header length of 4 GiB - 1 in a 20-byte file.
    let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
    v2.extend(u32::MAX.to_le_bytes());
    v2.extend(b"{'descr'");
    let e = read_bytes(&dir, "v2.npy", &v2).unwrap_err();
    assert!(e.contains("more than the 65536 a header may take"), "{e}");
    let mut v1 = b"\x93NUMPY\x01\x00".to_vec();
    v1.extend(1000u16.to_le_bytes());
    v1.extend(b"{'descr'");
    let e = read_bytes(&dir, "v1.npy", &v1).unwrap_err();
    assert!(e.contains("header length is 1000 bytes but the file ends 8 bytes after"), "{e}");
    let e = read_bytes(&dir, "v9.npy", b"\x93NUMPY\x09\x00\x00\x00").unwrap_err();
    assert!(e.contains("format version 9.0"), "{e}");
}

#[test]
fn devices_fifos_and_directories_are_refused_without_reading() {
    let dir = tempdir("special");
    let e = read_npy(Path::new("/dev/zero")).unwrap_err();
    assert_eq!(e, "/dev/zero is a character device, not a regular file; expected a .npy file");
    let e = read_npy(&dir).unwrap_err();
    assert!(e.ends_with("is a directory, not a regular file; expected a .npy file"), "{e}");
    let fifo = dir.join("fifo.npy");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // Opening a FIFO with no writer would block forever; it must be refused before that.
    let e = read_npy(&fifo).unwrap_err();
    assert!(e.ends_with("fifo.npy is a FIFO, not a regular file; expected a .npy file"), "{e}");
}
