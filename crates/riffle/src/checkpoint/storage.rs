//! Where checkpoints and savepoints are stored, through the `object_store` crate: a local
//! directory (the default) or an S3-compatible bucket (`s3://bucket/prefix`, with the `s3`
//! feature). Every file carries a checksum in the manifest, so a damaged checkpoint is detected
//! on restore and the one before it used.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use xxhash_rust::xxh3::xxh3_64;

use crate::checkpoint::manifest::{FileRef, MANIFEST_FILE, Manifest};
use crate::error::{Error, Result};

/// A store of checkpoints: one directory (prefix) per job.
pub struct CheckpointStorage {
    store: Arc<dyn ObjectStore>,
    root: Path,
    description: String,
    runtime: tokio::runtime::Runtime,
    /// The root as a local directory, when the storage is one (empty directories are removed).
    local_root: Option<std::path::PathBuf>,
    /// Files already held in memory, read instead of the store's copies.
    warm: Option<WarmFiles>,
}

/// Files of a checkpoint storage held in memory, by their path in the store: a storage given
/// them ([`CheckpointStorage::with_warm_files`]) reads them from here instead of the store, and,
/// when they are [write-through](WarmFiles::write_through), keeps what it writes here too. A
/// process group's standby replicas keep the snapshots of the partitions a takeover would
/// restore so (`riffle-kafka`'s `KafkaGroup::set_standby_replicas`). A file is used only if its
/// size and checksum are the ones its manifest names; otherwise it is read from the store.
///
/// ```
/// use riffle::checkpoint::{CheckpointStorage, WarmFiles};
/// let dir = tempfile::tempdir().unwrap();
/// let warm = WarmFiles::write_through();
/// let storage = CheckpointStorage::open(dir.path().to_str().unwrap(), &[], "job", "storage")
///     .unwrap()
///     .with_warm_files(Some(warm.clone()));
/// let file = storage.write("chk-1/state", b"counts".to_vec()).unwrap();
/// std::fs::remove_dir_all(dir.path().join("job")).unwrap(); // the store lost it
/// assert_eq!(storage.read(&file).unwrap(), b"counts");
/// assert_eq!((warm.len(), warm.bytes(), warm.hits()), (1, 6, 1));
/// warm.retain(|path| path != "job/chk-1/state");
/// assert!(storage.read(&file).is_err());
/// ```
#[derive(Clone, Default)]
pub struct WarmFiles {
    inner: Arc<WarmInner>,
}

/// Warm files by full store path: each file's checksum and bytes.
type WarmMap = std::collections::HashMap<String, (u64, Arc<[u8]>)>;

#[derive(Default)]
struct WarmInner {
    files: std::sync::RwLock<WarmMap>,
    hits: std::sync::atomic::AtomicU64,
    write_through: bool,
}

impl std::fmt::Debug for WarmFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WarmFiles({} files, {} bytes)", self.len(), self.bytes())
    }
}

impl WarmFiles {
    /// Warm files that also keep what a storage given them writes.
    pub fn write_through() -> Self {
        WarmFiles {
            inner: Arc::new(WarmInner {
                write_through: true,
                ..WarmInner::default()
            }),
        }
    }

    fn insert(&self, path: String, checksum: u64, bytes: Arc<[u8]>) {
        let mut files = self.inner.files.write().expect("warm files lock");
        files.insert(path, (checksum, bytes));
    }

    /// The bytes held at `path`, if held as `file` (its size and checksum).
    fn held(&self, path: &str, file: &FileRef) -> Option<Arc<[u8]>> {
        let files = self.inner.files.read().expect("warm files lock");
        files
            .get(path)
            .filter(|(checksum, bytes)| {
                *checksum == file.checksum && bytes.len() as u64 == file.size
            })
            .map(|(_, bytes)| bytes.clone())
    }

    fn contains(&self, path: &str, file: &FileRef) -> bool {
        self.held(path, file).is_some()
    }

    /// Drops every file but those whose path in the store `keep` accepts.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        let mut files = self.inner.files.write().expect("warm files lock");
        files.retain(|path, _| keep(path));
    }

    /// The number of files held.
    pub fn len(&self) -> usize {
        self.inner.files.read().expect("warm files lock").len()
    }

    /// Whether no file is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        let files = self.inner.files.read().expect("warm files lock");
        files.values().map(|(_, bytes)| bytes.len() as u64).sum()
    }

    /// How many reads were served from here.
    pub fn hits(&self) -> u64 {
        self.inner.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The content of `file` at `path`, if held with its size and checksum.
    fn get(&self, path: &str, file: &FileRef) -> Option<Vec<u8>> {
        let bytes = self.held(path, file)?;
        if xxh3_64(&bytes) != file.checksum {
            return None;
        }
        self.inner
            .hits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(bytes.to_vec())
    }
}

impl std::fmt::Debug for CheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CheckpointStorage({})", self.description)
    }
}

/// Prefix of checkpoint directories: `chk-<id>`.
pub(crate) const CHECKPOINT_PREFIX: &str = "chk-";

/// The directory of checkpoint `id` under a job's storage root.
pub fn checkpoint_dir(id: u64) -> String {
    format!("{CHECKPOINT_PREFIX}{id}")
}

/// Directory of store files shared between checkpoints.
pub(crate) const SHARED_DIR: &str = "shared";

fn storage_error(context: impl std::fmt::Display, error: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{context}: {error}"))
}

impl CheckpointStorage {
    /// Storage at `location` (a directory path, `file:///path`, or `s3://bucket/prefix`) under
    /// the sub-directory `job`. S3 settings (`endpoint`, `region`, `access_key_id`,
    /// `secret_access_key`, `allow_http`, `skip_signature`, and `instance_metadata=true` with an
    /// optional `metadata_endpoint` to let the cloud's metadata service supply credentials) come
    /// from `options` or from the `AWS_*` environment; with no credentials configured an `s3://`
    /// location is refused rather than asking the metadata service.
    pub fn open(
        location: &str,
        options: &[(String, String)],
        job: &str,
        setting: &str,
    ) -> Result<Self> {
        let mut local_root = None;
        let (store, root, description): (Arc<dyn ObjectStore>, Path, String) =
            if location.starts_with("s3://") {
                open_s3(location, options, setting)?
            } else {
                let dir = location.strip_prefix("file://").unwrap_or(location);
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::config(setting, format!("`{dir}`: {e}")))?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| Error::config(setting, format!("`{dir}`: {e}")))?;
                local_root = Some(std::path::Path::new(dir).join(job));
                (Arc::new(store), Path::default(), format!("file://{dir}"))
            };
        let root = if job.is_empty() {
            root
        } else {
            root.clone().join(job)
        };
        let mut storage = Self::from_store(store, root, description)?;
        storage.local_root = local_root;
        Ok(storage)
    }

    /// Storage over any object store (tests wrap one to inject failures).
    pub fn from_store(
        store: Arc<dyn ObjectStore>,
        root: Path,
        description: String,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("riffle-storage")
            .enable_all()
            .build()
            .map_err(|e| Error::io("cannot start the checkpoint storage runtime", e))?;
        Ok(CheckpointStorage {
            store,
            root,
            description,
            runtime,
            local_root: None,
            warm: None,
        })
    }

    /// This storage, reading the files `warm` holds from memory instead of the store (and
    /// keeping what it writes there, if they are write-through).
    pub fn with_warm_files(mut self, warm: Option<WarmFiles>) -> Self {
        self.warm = warm;
        self
    }

    /// The path in the store of `relative` (what [`WarmFiles`] are keyed by).
    pub fn store_path(&self, relative: &str) -> String {
        self.path(relative).to_string()
    }

    /// Keeps `bytes`, read by the caller as the content of `file`, in this storage's warm files
    /// (nothing without them).
    pub fn keep_warm(&self, file: &FileRef, bytes: Vec<u8>) {
        if let Some(warm) = &self.warm {
            warm.insert(self.store_path(&file.path), file.checksum, bytes.into());
        }
    }

    /// Whether this storage's warm files hold `file`.
    pub fn is_warm(&self, file: &FileRef) -> bool {
        self.warm
            .as_ref()
            .is_some_and(|warm| warm.contains(&self.store_path(&file.path), file))
    }

    /// The storage's location, without credentials.
    pub fn description(&self) -> &str {
        &self.description
    }

    fn path(&self, relative: &str) -> Path {
        relative
            .split('/')
            .filter(|p| !p.is_empty())
            .fold(self.root.clone(), |path, part| path.join(part))
    }

    /// Writes `bytes` to `relative`; returns its reference with checksum.
    pub fn write(&self, relative: &str, bytes: Vec<u8>) -> Result<FileRef> {
        let file = FileRef {
            path: relative.to_string(),
            size: bytes.len() as u64,
            checksum: xxh3_64(&bytes),
        };
        let path = self.path(relative);
        if let Some(warm) = self.warm.as_ref().filter(|w| w.inner.write_through) {
            warm.insert(path.to_string(), file.checksum, Arc::from(&bytes[..]));
        }
        self.runtime
            .block_on(self.store.put(&path, PutPayload::from(bytes)))
            .map_err(|e| {
                storage_error(format!("cannot write `{path}` to {}", self.description), e)
            })?;
        Ok(file)
    }

    /// Reads a file and checks its size and checksum.
    pub fn read(&self, file: &FileRef) -> Result<Vec<u8>> {
        let path = self.path(&file.path);
        if let Some(bytes) = self
            .warm
            .as_ref()
            .and_then(|warm| warm.get(path.as_ref(), file))
        {
            return Ok(bytes);
        }
        let bytes = self
            .runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map_err(|e| {
                storage_error(format!("cannot read `{path}` from {}", self.description), e)
            })?;
        if bytes.len() as u64 != file.size || xxh3_64(&bytes) != file.checksum {
            return Err(Error::Checkpoint(format!(
                "`{path}` is damaged: {} bytes with checksum {:x}, expected {} bytes with checksum {:x}",
                bytes.len(),
                xxh3_64(&bytes),
                file.size,
                file.checksum
            )));
        }
        Ok(bytes.to_vec())
    }

    /// Writes the manifest into `dir` (last: it marks the checkpoint complete).
    pub fn write_manifest(&self, dir: &str, manifest: &Manifest) -> Result<()> {
        let json = manifest.to_json().map_err(Error::user)?;
        self.write(&format!("{dir}/{MANIFEST_FILE}"), json)
            .map(drop)
    }

    /// Reads `relative` as it is (no checksum to check it against); `None` when it does not exist.
    pub fn read_optional(&self, relative: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(relative);
        match self
            .runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
        {
            Ok(bytes) => Ok(Some(bytes.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(storage_error(
                format!("cannot read `{path}` from {}", self.description),
                e,
            )),
        }
    }

    /// Whether the file `relative` exists (a HEAD request; a file held warm counts only if it
    /// is in the store too).
    pub fn exists(&self, relative: &str) -> Result<bool> {
        let path = self.path(relative);
        match self.runtime.block_on(self.store.head(&path)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(storage_error(
                format!("cannot look up `{path}` in {}", self.description),
                e,
            )),
        }
    }

    /// Reads the manifest of `dir`; `None` when `dir` has none (never completed, or removed).
    pub fn read_manifest_optional(&self, dir: &str) -> Result<Option<Manifest>> {
        let relative = format!("{dir}/{MANIFEST_FILE}");
        let Some(bytes) = self.read_optional(&relative)? else {
            return Ok(None);
        };
        Manifest::from_json(&bytes).map(Some).map_err(|e| {
            Error::Checkpoint(format!(
                "`{}` is not a usable manifest: {e}",
                self.path(&relative)
            ))
        })
    }

    /// Reads the manifest of `dir`.
    pub fn read_manifest(&self, dir: &str) -> Result<Manifest> {
        let path = self.path(&format!("{dir}/{MANIFEST_FILE}"));
        let bytes = self
            .runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map_err(|e| {
                storage_error(format!("cannot read `{path}` from {}", self.description), e)
            })?;
        Manifest::from_json(&bytes)
            .map_err(|e| Error::Checkpoint(format!("`{path}` is not a usable manifest: {e}")))
    }

    /// The sub-directories of the root, by name.
    fn directories(&self) -> Result<Vec<String>> {
        self.subdirectories("")
    }

    /// The sub-directories of `dir` (relative to the root; `""`: the root), by name.
    pub fn subdirectories(&self, dir: &str) -> Result<Vec<String>> {
        let prefix = self.path(dir);
        let listing = self
            .runtime
            .block_on(self.store.list_with_delimiter(Some(&prefix)))
            .map_err(|e| {
                storage_error(format!("cannot list `{prefix}` in {}", self.description), e)
            })?;
        Ok(listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect())
    }

    /// The files directly in `dir` (relative to the root), by name.
    pub fn files(&self, dir: &str) -> Result<Vec<String>> {
        let prefix = self.path(dir);
        let listing = self
            .runtime
            .block_on(self.store.list_with_delimiter(Some(&prefix)))
            .map_err(|e| {
                storage_error(format!("cannot list `{prefix}` in {}", self.description), e)
            })?;
        Ok(listing
            .objects
            .iter()
            .filter_map(|o| o.location.filename().map(str::to_string))
            .collect())
    }

    /// When the newest file under `dir` was written; `None` when `dir` holds no file.
    pub fn last_modified(&self, dir: &str) -> Result<Option<std::time::SystemTime>> {
        let prefix = self.path(dir);
        let objects: Vec<_> = self
            .runtime
            .block_on(self.store.list(Some(&prefix)).try_collect())
            .map_err(|e| {
                storage_error(format!("cannot list `{prefix}` in {}", self.description), e)
            })?;
        Ok(objects
            .iter()
            .map(|object| std::time::SystemTime::from(object.last_modified))
            .max())
    }

    /// Ids of the checkpoints that completed (have a manifest), ascending.
    pub fn completed_checkpoints(&self) -> Result<Vec<u64>> {
        let ids: BTreeSet<u64> = self.checkpoint_directories()?.into_iter().collect();
        let mut completed = Vec::new();
        for id in ids {
            let path = self.path(&format!("{CHECKPOINT_PREFIX}{id}/{MANIFEST_FILE}"));
            if self.runtime.block_on(self.store.head(&path)).is_ok() {
                completed.push(id);
            }
        }
        Ok(completed)
    }

    /// Ids of every checkpoint directory, complete or not.
    pub fn checkpoint_directories(&self) -> Result<Vec<u64>> {
        Ok(self
            .directories()?
            .iter()
            .filter_map(|name| {
                name.strip_prefix(CHECKPOINT_PREFIX)
                    .and_then(|id| id.parse().ok())
            })
            .collect())
    }

    /// Deletes everything under `dir`. Idempotent: a file that another process deleted first
    /// (two clean-ups of one directory at once) is not an error.
    pub fn delete_dir(&self, dir: &str) -> Result<()> {
        let prefix = self.path(dir);
        self.runtime
            .block_on(async {
                let objects: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
                for object in objects {
                    match self.store.delete(&object.location).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok::<_, object_store::Error>(())
            })
            .map_err(|e| {
                storage_error(
                    format!("cannot delete `{prefix}` in {}", self.description),
                    e,
                )
            })?;
        if let Some(local) = &self.local_root {
            // A local directory keeps its emptied sub-directories: remove them too.
            let _ = std::fs::remove_dir_all(local.join(dir));
        }
        Ok(())
    }

    /// Keeps the newest `retained` completed checkpoints and removes the older ones, and the
    /// directories of checkpoints that never completed and are older than the newest complete.
    pub fn retain(&self, retained: usize) -> Result<usize> {
        self.retain_from(retained, u64::MAX)
    }

    /// [`retain`](Self::retain), keeping besides every completed checkpoint from `floor` on (a
    /// process group's run keeps the checkpoint its last commit names, and those a commit in
    /// progress may name: [`RetentionFloor`]).
    pub fn retain_from(&self, retained: usize, floor: u64) -> Result<usize> {
        let completed = self.completed_checkpoints()?;
        let Some(&newest) = completed.last() else {
            return Ok(0);
        };
        let keep: BTreeSet<u64> = completed
            .iter()
            .rev()
            .take(retained.max(1))
            .chain(completed.iter().filter(|id| **id >= floor))
            .copied()
            .collect();
        let mut removed = 0;
        for id in self.checkpoint_directories()? {
            if !keep.contains(&id) && id < newest {
                self.delete_dir(&format!("{CHECKPOINT_PREFIX}{id}"))?;
                removed += 1;
            }
        }
        self.remove_unreferenced_shared_files(&keep)?;
        Ok(removed)
    }

    /// Deletes the shared store files no kept checkpoint references.
    fn remove_unreferenced_shared_files(&self, kept: &BTreeSet<u64>) -> Result<()> {
        let mut referenced = BTreeSet::new();
        for id in kept {
            let manifest = self.read_manifest(&format!("{CHECKPOINT_PREFIX}{id}"))?;
            referenced.extend(manifest.store_files().map(|f| f.path.clone()));
        }
        let prefix = self.path(SHARED_DIR);
        let root = self.root.clone();
        self.runtime
            .block_on(async {
                let objects: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
                for object in objects {
                    let relative: Vec<_> = object
                        .location
                        .prefix_match(&root)
                        .map(|parts| parts.map(|p| p.as_ref().to_string()).collect())
                        .unwrap_or_default();
                    if !referenced.contains(&relative.join("/")) {
                        self.store.delete(&object.location).await?;
                    }
                }
                Ok::<_, object_store::Error>(())
            })
            .map_err(|e| {
                storage_error(
                    format!("cannot clean `{prefix}` in {}", self.description),
                    e,
                )
            })
    }
}

#[cfg(feature = "s3")]
fn open_s3(
    location: &str,
    options: &[(String, String)],
    setting: &str,
) -> Result<(Arc<dyn ObjectStore>, Path, String)> {
    s3_store(
        object_store::aws::AmazonS3Builder::from_env(),
        location,
        options,
        setting,
    )
}

/// The S3 store of `location` from `base` (the `AWS_*` environment in production) and `options`.
///
/// Credentials come only from what is configured: static keys, a web-identity token file, or
/// the container-credentials variables of ECS/EKS; `skip_signature=true` makes anonymous
/// requests. The instance metadata service (IMDS, `169.254.169.254`), which `object_store` falls
/// back to when nothing is configured, is asked only when the option `instance_metadata=true`
/// says so (its address from `metadata_endpoint`); otherwise the storage is refused before any
/// request, naming the setting.
#[cfg(feature = "s3")]
fn s3_store(
    base: object_store::aws::AmazonS3Builder,
    location: &str,
    options: &[(String, String)],
    setting: &str,
) -> Result<(Arc<dyn ObjectStore>, Path, String)> {
    use object_store::aws::AmazonS3ConfigKey as Key;
    let rest = location.trim_start_matches("s3://");
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::config(
            setting,
            format!("`{location}` names no bucket"),
        ));
    }
    let mut builder = base.with_bucket_name(bucket);
    let mut endpoint = None;
    let mut instance_metadata = false;
    for (key, value) in options {
        builder = match key.as_str() {
            "endpoint" => {
                endpoint = Some(value.clone());
                builder
                    .with_endpoint(value)
                    .with_virtual_hosted_style_request(false)
            }
            "region" => builder.with_region(value),
            "access_key_id" => builder.with_access_key_id(value),
            "secret_access_key" => builder.with_secret_access_key(value),
            "allow_http" => builder.with_allow_http(value == "true"),
            "skip_signature" => builder.with_skip_signature(value == "true"),
            "instance_metadata" => {
                instance_metadata = match value.as_str() {
                    "true" => true,
                    "false" => false,
                    other => {
                        return Err(Error::config(
                            setting,
                            format!(
                                "S3 option instance_metadata=`{other}`: expected true or false"
                            ),
                        ));
                    }
                };
                builder
            }
            "metadata_endpoint" => builder.with_metadata_endpoint(value),
            other => {
                return Err(Error::config(
                    setting,
                    format!("unknown S3 option `{other}`"),
                ));
            }
        };
    }
    let set = |key: Key| {
        builder
            .get_config_value(&key)
            .is_some_and(|v| !v.is_empty())
    };
    let configured = set(Key::AccessKeyId)
        || set(Key::SecretAccessKey)
        || (set(Key::WebIdentityTokenFile) && set(Key::RoleArn))
        || set(Key::ContainerCredentialsRelativeUri)
        || set(Key::ContainerCredentialsFullUri)
        || builder
            .get_config_value(&Key::SkipSignature)
            .is_some_and(|v| v == "true");
    if !configured && !instance_metadata {
        return Err(Error::config(
            setting,
            format!(
                "`{location}`: no S3 credentials are configured (access_key_id and \
                 secret_access_key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a web identity, \
                 or skip_signature=true for anonymous requests); the instance metadata service is \
                 asked for credentials only with the option instance_metadata=true"
            ),
        ));
    }
    let store = builder
        .build()
        .map_err(|e| Error::config(setting, format!("`{location}`: {e}")))?;
    let description = match endpoint {
        Some(endpoint) => format!("s3://{bucket}/{prefix} at {endpoint}"),
        None => format!("s3://{bucket}/{prefix}"),
    };
    Ok((Arc::new(store), Path::from(prefix), description))
}

#[cfg(not(feature = "s3"))]
fn open_s3(
    location: &str,
    _: &[(String, String)],
    setting: &str,
) -> Result<(Arc<dyn ObjectStore>, Path, String)> {
    Err(Error::config(
        setting,
        format!("`{location}` needs Riffle built with the `s3` feature"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::manifest::{MANIFEST_VERSION, SnapshotKind};

    fn manifest(id: u64) -> Manifest {
        Manifest {
            version: MANIFEST_VERSION,
            job: "job".into(),
            checkpoint_id: id,
            kind: SnapshotKind::Checkpoint,
            timestamp: 0,
            max_parallelism: 128,
            key_hash_version: crate::keys::KEY_HASH_VERSION,
            operators: Default::default(),
            stores: Vec::new(),
            finished: false,
        }
    }

    /// Storage in a local directory, for job `job`.
    fn local(dir: &std::path::Path) -> CheckpointStorage {
        CheckpointStorage::open(dir.to_str().unwrap(), &[], "job", "checkpoint storage").unwrap()
    }

    #[test]
    fn files_round_trip_and_damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let storage = local(dir.path());
        let file = storage
            .write("chk-1/op/0.state", b"hello".to_vec())
            .unwrap();
        assert_eq!(storage.read(&file).unwrap(), b"hello");
        std::fs::write(dir.path().join("job/chk-1/op/0.state"), b"hellO").unwrap();
        let err = storage.read(&file).unwrap_err();
        assert!(err.to_string().contains("is damaged"), "{err}");
    }

    /// A loopback listener posing as the instance metadata service: the first line of every
    /// request it receives goes to the channel, and it answers 403.
    #[cfg(feature = "s3")]
    fn metadata_service() -> (String, std::sync::mpsc::Receiver<String>) {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let (seen, requests) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut line = String::new();
                let _ = BufReader::new(&stream).read_line(&mut line);
                let _ = seen.send(line.trim().to_string());
                let _ = stream.write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
            }
        });
        (address, requests)
    }

    /// S3 options with the metadata service at `metadata` and S3 itself at a closed loopback
    /// port: nothing leaves the machine.
    #[cfg(feature = "s3")]
    fn no_credentials(metadata: &str) -> Vec<(String, String)> {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        [
            ("endpoint", endpoint.as_str()),
            ("region", "us-east-1"),
            ("allow_http", "true"),
            ("metadata_endpoint", metadata),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[cfg(feature = "s3")]
    fn try_get(store: &Arc<dyn ObjectStore>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = runtime.block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                store.get(&Path::from("x")),
            )
            .await
        });
    }

    #[cfg(feature = "s3")]
    #[test]
    fn s3_without_configured_credentials_never_asks_the_metadata_service() {
        use object_store::aws::AmazonS3Builder;
        let (metadata, requests) = metadata_service();
        let options = no_credentials(&metadata);
        let err = s3_store(
            AmazonS3Builder::new(),
            "s3://bucket/savepoints",
            &options,
            "savepoint target",
        )
        .map(|_| ())
        .expect_err("refused");
        assert_eq!(
            err.to_string(),
            "invalid configuration: `savepoint target` `s3://bucket/savepoints`: no S3 \
             credentials are configured (access_key_id and secret_access_key, or \
             AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a web identity, or skip_signature=true \
             for anonymous requests); the instance metadata service is asked for credentials only \
             with the option instance_metadata=true"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(
            requests.try_iter().collect::<Vec<_>>(),
            Vec::<String>::new()
        );

        // Static keys: the store is built and used without the metadata service.
        let mut keyed = options.clone();
        keyed.push(("access_key_id".into(), "key".into()));
        keyed.push(("secret_access_key".into(), "secret".into()));
        let (store, _, _) =
            s3_store(AmazonS3Builder::new(), "s3://bucket/p", &keyed, "storage").unwrap();
        try_get(&store);
        assert_eq!(
            requests.try_iter().collect::<Vec<_>>(),
            Vec::<String>::new()
        );

        // The control: asked for, the metadata service is what gets the request.
        let mut asked = options;
        asked.push(("instance_metadata".into(), "true".into()));
        let (store, _, _) =
            s3_store(AmazonS3Builder::new(), "s3://bucket/p", &asked, "storage").unwrap();
        try_get(&store);
        let seen: Vec<String> = requests.try_iter().collect();
        assert_eq!(
            seen.first().map(String::as_str),
            Some("PUT /latest/api/token HTTP/1.1"),
            "{seen:?}"
        );
        let bad = [("instance_metadata".to_string(), "yes".to_string())];
        let err = s3_store(AmazonS3Builder::new(), "s3://b/p", &bad, "storage")
            .err()
            .unwrap();
        assert!(err.to_string().contains("instance_metadata=`yes`"), "{err}");
    }

    #[test]
    fn completed_checkpoints_have_manifests_and_old_ones_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let storage = local(dir.path());
        for id in 1..=5 {
            storage
                .write(&format!("chk-{id}/op/0.state"), vec![id as u8])
                .unwrap();
            if id != 4 {
                storage
                    .write_manifest(&format!("chk-{id}"), &manifest(id))
                    .unwrap();
            }
        }
        storage.write("chk-6/op/0.state", vec![6]).unwrap(); // in progress
        assert_eq!(storage.completed_checkpoints().unwrap(), vec![1, 2, 3, 5]);
        assert_eq!(storage.read_manifest("chk-5").unwrap(), manifest(5));
        assert_eq!(storage.retain(2).unwrap(), 3, "1, 2 and the incomplete 4");
        assert_eq!(
            storage
                .checkpoint_directories()
                .unwrap()
                .into_iter()
                .collect::<BTreeSet<_>>(),
            [3, 5, 6].into()
        );
    }
}
