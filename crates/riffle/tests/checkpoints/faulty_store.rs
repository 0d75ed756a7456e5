//! An object store that fails or slows down chosen writes: failures during uploads.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// Local files, with the n-th writes failing and every write delayed.
#[derive(Debug)]
pub struct FaultyStore {
    inner: LocalFileSystem,
    failing: Mutex<BTreeSet<u64>>,
    puts: AtomicU64,
    delay: Duration,
}

impl FaultyStore {
    /// Files under `dir`; the writes numbered in `failing` (from 0) fail; each write waits `delay`.
    pub fn new(
        dir: &std::path::Path,
        failing: impl IntoIterator<Item = u64>,
        delay: Duration,
    ) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        FaultyStore {
            inner: LocalFileSystem::new_with_prefix(dir).unwrap(),
            failing: Mutex::new(failing.into_iter().collect()),
            puts: AtomicU64::new(0),
            delay,
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore")
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let n = self.puts.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        if self.failing.lock().unwrap().remove(&n) {
            return Err(object_store::Error::Generic {
                store: "faulty",
                source: format!("injected failure of write {n}").into(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
