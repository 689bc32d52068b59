//! `cargo test -p workbook` runs `workbook verify` over the real repository: every chapter's tests
//! fail on the stubs, pass on the solutions, and match chapter.toml.

use crate::common;

use std::path::Path;

#[test]
fn verify_all_chapters() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let watched = [root.join("exercises"), root.join("solutions")];
    let before = common::snapshot(&watched);
    // GPUMEM_DEVICE and the other settings pass through: `GPUMEM_DEVICE=cuda cargo test` verifies
    // on the GPU.
    let (output, stdout, stderr) = common::run(
        std::process::Command::new(env!("CARGO_BIN_EXE_workbook"))
            .arg("--root")
            .arg(&root)
            .arg("verify"),
    );
    assert!(
        output.status.success(),
        "workbook verify failed ({}):\n{stdout}\n--- stderr ---\n{stderr}",
        output.status
    );
    assert!(
        before == common::snapshot(&watched),
        "workbook verify changed files under exercises/ or solutions/"
    );
}
