//! A Gradescope package laid out as Gradescope lays it out, and its `run_autograder` run, for the
//! tests that grade through an exported package.

use super::run;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Unpacks the zip `zip_path` into `dest` as Gradescope unpacks an autograder into
/// `/autograder/source` (with each file's mode), and returns the names it held.
pub fn unpack(zip_path: &Path, dest: &Path) -> Vec<String> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(zip_path).unwrap()).unwrap();
    let mut names = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).unwrap();
        let name = entry.enclosed_name().expect("a relative name");
        names.push(name.display().to_string());
        let path = dest.join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).unwrap();
        std::fs::write(&path, bytes).unwrap();
        if let Some(mode) = entry.unix_mode() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o777)).unwrap();
        }
    }
    names
}

/// Points the package's scratch builds at this repository's build folder, so that they reuse
/// what `cargo test` built (on Gradescope, setup.sh fills the package's own).
pub fn share_build_folder(source: &Path) {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/workbook/target");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(source.join("target/workbook")).unwrap();
    std::os::unix::fs::symlink(&shared, source.join("target/workbook/target")).unwrap();
}

/// Runs the package's `run_autograder` in `autograder` (laid out as `/autograder`) on what is in
/// its `submission/`, with this build's `workbook`, and returns the results.json it wrote;
/// `who` names the submission when it fails.
pub fn run_autograder(autograder: &Path, who: &str) -> serde_json::Value {
    let results = autograder.join("results/results.json");
    let _ = std::fs::remove_file(&results);
    let (output, stdout, stderr) = run(std::process::Command::new("bash")
        .arg(autograder.join("source/run_autograder"))
        .env("AUTOGRADER_ROOT", autograder)
        .env("WORKBOOK_BIN", env!("CARGO_BIN_EXE_workbook"))
        .env_remove("GPUMEM_DEVICE")
        .env_remove("GPUMEM_CPU_CAPACITY"));
    assert!(output.status.success(), "{who}: {stdout}\n{stderr}");
    serde_json::from_str(&std::fs::read_to_string(&results).expect("results.json"))
        .expect("results.json parses")
}
