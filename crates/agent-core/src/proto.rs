//! Generated gRPC/protobuf code, packages exactly as argocd-agent's.
#![allow(clippy::all, missing_docs)]

pub mod authapi {
    tonic::include_proto!("authapi");
}
pub mod versionapi {
    tonic::include_proto!("versionapi");
}
pub mod eventstreamapi {
    tonic::include_proto!("eventstreamapi");
}
/// The peer's principal/apis/logstreamapi (package `principal.apis.logstreamapi`).
pub mod logstreamapi {
    tonic::include_proto!("principal.apis.logstreamapi");
}
/// The peer's principal/apis/terminalstream (package `terminalstreamapi`).
pub mod terminalstreamapi {
    tonic::include_proto!("terminalstreamapi");
}
/// The peer's principal/apis/replication (package `replicationapi`): principal-to-principal
/// replication for cross-cluster HA.
pub mod replicationapi {
    tonic::include_proto!("replicationapi");
}
/// The peer's principal/apis/haadmin (package `haadminapi`): `ha status|promote|demote`.
pub mod haadminapi {
    tonic::include_proto!("haadminapi");
}
/// Ours (package `argocdpull.redisrelay.v1`): the Redis proxy between active/active replicas.
pub mod redisrelay {
    tonic::include_proto!("argocdpull.redisrelay.v1");
}
pub mod io {
    pub mod cloudevents {
        pub mod v1 {
            tonic::include_proto!("io.cloudevents.v1");
        }
    }
}

/// The codec of every generated service and client: prost's, with a 1 KiB first buffer per RPC
/// direction instead of tonic's 8 KiB. Tonic allocates both buffers when a stream opens and keeps
/// them for its life, so with 1,000 idle agents the default was 16 MiB on the principal; a
/// buffer grows on demand (and keeps its size) for the RPCs that carry larger messages.
pub mod codec {
    use std::marker::PhantomData;

    use tonic::codec::{BufferSettings, Codec};
    use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

    /// First buffer of an RPC direction.
    pub const BUFFER_SIZE: usize = 1024;
    /// Encoded bytes after which a stream yields a chunk to HTTP/2 (tonic's default is 32 KiB).
    /// A stream's encode buffer, and the decode buffer of its peer, keep the capacity of the
    /// largest chunk for the stream's life: with 32 KiB, an agent sent its 10 Applications at
    /// once kept ~13 KiB on each side (heaptrack), 10,000 agents over 3 replicas peaked at
    /// 579-604 MiB per replica; with 4 KiB at 468-488 MiB, events/s within the runs' spread.
    const YIELD_THRESHOLD: usize = 4 * 1024;

    fn settings() -> BufferSettings {
        BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD)
    }

    /// [`ProstCodec`] with [`BUFFER_SIZE`] buffers (`codec_path` in build.rs).
    #[derive(Debug, Clone)]
    pub struct SmallBufferCodec<T, U>(PhantomData<(T, U)>);

    impl<T, U> Default for SmallBufferCodec<T, U> {
        fn default() -> Self {
            Self(PhantomData)
        }
    }

    impl<T, U> Codec for SmallBufferCodec<T, U>
    where
        T: prost::Message + Send + 'static,
        U: prost::Message + Default + Send + 'static,
    {
        type Encode = T;
        type Decode = U;
        type Encoder = ProstEncoder<T>;
        type Decoder = ProstDecoder<U>;

        fn encoder(&mut self) -> Self::Encoder {
            ProstCodec::<T, U>::raw_encoder(settings())
        }

        fn decoder(&mut self) -> Self::Decoder {
            ProstCodec::<T, U>::raw_decoder(settings())
        }
    }
}
