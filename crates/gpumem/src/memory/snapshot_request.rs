//! The snapshot a walkthrough writes when `workbook pictures` asks for it (`GPUMEM_SNAPSHOT`).

use crate::memory::device::Device;
use crate::policy::history::SNAPSHOT_VAR;

/// A snapshot asked for with `GPUMEM_SNAPSHOT=<file>`: the book's pictures are drawn from it.
#[derive(Debug, Clone, Default)]
pub struct SnapshotRequest {
    file: Option<std::path::PathBuf>,
}

impl SnapshotRequest {
    /// Reads `GPUMEM_SNAPSHOT`; when it names a file, starts recording `dev`'s history, and its
    /// activity (pinned host blocks, copies and kernels), from here.
    pub fn from_env(dev: &Device) -> SnapshotRequest {
        let file = std::env::var_os(SNAPSHOT_VAR)
            .filter(|f| !f.is_empty())
            .map(Into::into);
        if file.is_some() {
            dev.record_memory_history(true);
            dev.record_activity(true);
        }
        SnapshotRequest { file }
    }

    /// Whether a snapshot was asked for.
    pub fn is_requested(&self) -> bool {
        self.file.is_some()
    }

    /// Writes `dev`'s snapshot (segments now, and the history) to the file asked for, if any;
    /// the activity recorded goes beside them under the key `activity` (which
    /// [`Snapshot::from_json`](crate::history::Snapshot::from_json) passes over, and no pickle holds).
    pub fn write(&self, dev: &Device) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let mut json = serde_json::to_value(dev.snapshot()).map_err(std::io::Error::other)?;
        let activity = dev.activity();
        if let (false, Some(map)) = (activity.is_empty(), json.as_object_mut()) {
            let activity = serde_json::to_value(activity).map_err(std::io::Error::other)?;
            map.insert("activity".to_string(), activity);
        }
        let text = serde_json::to_string_pretty(&json).map_err(std::io::Error::other)?;
        std::fs::write(file, text).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("writing the snapshot to {}: {e}", file.display()),
            )
        })
    }
}
