//! The parameter server's gRPC service, declared in Rust (tonic's manual builder) over the
//! prost messages of `src/wire.rs`: no .proto file, no protoc on the build machine.

use tonic_build::manual::{Builder, Method, Service};

fn method(name: &str, route: &str, input: &str, output: &str) -> tonic_build::manual::MethodBuilder {
    Method::builder()
        .name(name)
        .route_name(route)
        .input_type(format!("crate::wire::{input}"))
        .output_type(format!("crate::wire::{output}"))
        .codec_path("tonic_prost::ProstCodec")
}

fn main() {
    let ps = Service::builder()
        .name("ParameterServer")
        .package("graphc.dist")
        .method(method("hello", "Hello", "Hello", "Welcome").build())
        .method(method("pull", "Pull", "Pull", "Chunk").server_streaming().build())
        .method(method("push", "Push", "Chunk", "Pushed").client_streaming().build())
        .method(method("done", "Done", "Done", "Empty").build())
        .method(method("save", "Save", "Save", "Saved").build())
        .method(method("abort", "Abort", "Abort", "Empty").build())
        .build();
    Builder::new().compile(&[ps]);
}
