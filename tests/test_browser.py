"""A real-browser check of lesson 05's experiment panel, in JupyterLab driven by headless Chromium.

JupyterLab runs on 127.0.0.1 (free port, no token, SMOKE mode, every HOME/Jupyter/matplotlib dir in a temp
dir); Debian's headless Chromium, driven by Playwright, opens notebooks/05_learning_rate.ipynb, waits for the
status bar to read Idle, runs all cells, waits for the last panel to render (lr slider, Run button, status
line, plot image), presses ArrowRight on the lr slider, clicks Run and checks that the status line goes through
"training" to "finished" and that the plot image changes. Screenshots go to $MINIRL_ARTIFACTS/browser or
tests/artifacts/browser. Skipped when chromium or the playwright package is missing (.ci/run installs both).

MINIRL_BROWSER_NOTEBOOK=/path/to/nb.ipynb points the check at another notebook (its folder becomes Lab's root).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSON = ROOT / "notebooks" / "05_learning_rate.ipynb"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]
SERVER_START_S = 60   # JupyterLab answers /api/status
KERNEL_IDLE_S = 60    # status bar reads Idle after the page opened
PANEL_S = 120         # Run All until the panel's plot image is shown (imports torch + transformers in the kernel)
RUN_S = 120           # Run click until "finished" and a new image

# true once every non-empty code cell of the open notebook has an execution count; the error text if one failed
ALL_CELLS_RAN_JS = r"""() => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    const code = nb.widgets.filter(c => c.model.type === 'code' && c.model.sharedModel.getSource().trim() !== '');
    for (const c of code) {
        for (const o of c.model.outputs.toJSON()) {
            if (o.output_type === 'error') return `${o.ename}: ${o.evalue}\n` + o.traceback.join('\n').replace(/\x1b\[[0-9;]*m/g, '');
        }
    }
    return code.length > 0 && code.every(c => c.model.executionCount !== null);
}"""

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def chromium_path() -> str | None:
    """$MINIRL_CHROMIUM, else chromium / chromium-browser on PATH; only one that answers --version."""
    env = os.environ.get("MINIRL_CHROMIUM")
    candidates = [env] if env else [shutil.which(n) for n in ("chromium", "chromium-browser")]
    for path in filter(None, candidates):
        try:
            ok = subprocess.run([path, "--version"], capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return path
    return None


def artifact_dir() -> Path:
    base = os.environ.get("MINIRL_ARTIFACTS")
    path = Path(base) / "browser" if base else ROOT / "tests" / "artifacts" / "browser"
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env(tmp: Path) -> dict:
    """The server's (and so the kernel's) environment: every per-user dir in tmp, SMOKE on, offline."""
    dirs = {name: tmp / name.lower() for name in (
        "HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "JUPYTER_CONFIG_DIR",
        "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR",
        "IPYTHONDIR", "MPLCONFIGDIR", "MINIRL_CACHE")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    dirs["XDG_RUNTIME_DIR"].chmod(0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "XDG_", "MPL"))}
    env.update({k: str(v) for k, v in dirs.items()})
    env.update(MINIRL_SMOKE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    # settings: no news/update toasts, no autosave (the lesson on disk keeps its committed outputs)
    settings = dirs["JUPYTERLAB_SETTINGS_DIR"] / "@jupyterlab"
    for plugin, values in {
        "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False,
                                            "doNotDisturbMode": True},
        "docmanager-extension/plugin": {"autosave": False},
        "notebook-extension/tracker": {"windowingMode": "none"},  # every cell in the DOM
    }.items():
        file = settings / f"{plugin}.jupyterlab-settings"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(values))
    return env


class LabServer:
    def __init__(self, root: Path, env: dict, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self._log = open(log, "wb")
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               "--port-retries=0", f"--ServerApp.root_dir={root}", "--IdentityProvider.token=",
               "--ServerApp.password=", "--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.expose_app_in_browser=True"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers often run as root
            cmd.append("--allow-root")
        self.proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"JupyterLab did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        """SIGTERM (the server shuts its kernels down), then SIGKILL whatever it started that is still alive."""
        try:
            import psutil

            children = psutil.Process(self.proc.pid).children(recursive=True)
        except Exception:
            children = []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        for child in children:  # kernels run in their own process group
            try:
                if child.is_running():
                    child.kill()
            except Exception:
                pass
        self._log.close()


def test_lesson05_panel_in_chromium(tmp_path):
    chromium = chromium_path()
    if chromium is None:
        pytest.skip("no working chromium executable (Debian: apt-get install chromium; .ci/run installs it when "
                    "apt-get exists; or set MINIRL_CHROMIUM=/path/to/chromium)")
    pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (pip install playwright)")
    pytest.importorskip("jupyterlab", reason="jupyterlab is not installed")
    from playwright.sync_api import expect, sync_playwright

    notebook = Path(os.environ.get("MINIRL_BROWSER_NOTEBOOK") or LESSON).resolve()
    if not notebook.exists():
        pytest.fail(f"{notebook} does not exist")
    root = ROOT if notebook.is_relative_to(ROOT) else notebook.parent
    on_disk = notebook.read_bytes()
    artifacts = artifact_dir()
    for old in [*artifacts.glob("*.png"), artifacts / "jupyterlab.log"]:
        old.unlink(missing_ok=True)

    server = LabServer(root, isolated_env(tmp_path), tmp_path / "jupyterlab.log")
    page = None
    t0 = time.monotonic()
    timings = {}
    try:
        server.wait_ready(SERVER_START_S)
        timings["server"] = time.monotonic() - t0
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=chromium, headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 1800})
            try:
                page = context.new_page()
                console = []
                page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
                page.set_default_timeout(30_000)
                rel = notebook.relative_to(root).as_posix()
                page.goto(f"{server.url}/lab/tree/{rel}?reset", wait_until="domcontentloaded")

                # the status bar's kernel item, not the toolbar's execution indicator (idle before it connects)
                status_bar = page.locator("#jp-main-statusbar")
                expect(status_bar).to_contain_text(re.compile(r"\|\s*Idle"), timeout=KERNEL_IDLE_S * 1000)
                timings["kernel idle"] = time.monotonic() - t0

                # fresh prompts (the committed outputs carry execution counts), then Run -> Run All Cells
                page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
                page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
                page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
                # every non-empty code cell has run (an error output stops the wait at once)
                done = page.wait_for_function(ALL_CELLS_RAN_JS, timeout=PANEL_S * 1000).json_value()
                assert done is True, f"a notebook cell failed:\n{done}"
                timings["run all"] = time.monotonic() - t0

                # the last panel in the notebook: the last output area that has the panel's Run button
                run_button = page.locator(".widget-button", has_text=re.compile(r"^\s*Run\s*$")).last
                expect(run_button).to_be_visible(timeout=30_000)
                panel = page.locator(".jp-OutputArea-output").filter(has=run_button).last
                lr = panel.locator(".widget-slider, .widget-hslider").filter(
                    has=page.locator(".widget-label", has_text=re.compile(r"^lr$"))).first
                status = run_button.locator("xpath=..").locator(".widget-html").first
                image = panel.locator(".widget-output img").first
                expect(lr).to_be_visible()
                expect(image).to_have_attribute("src", re.compile(r"^data:image/png"), timeout=30_000)
                expect(run_button).to_be_enabled()
                expect(status).to_contain_text(re.compile(r"\S"), timeout=30_000)
                expect(status_bar).to_contain_text(re.compile(r"\|\s*Idle"), timeout=30_000)
                timings["panel"] = time.monotonic() - t0
                panel.screenshot(path=str(artifacts / "before.png"))  # the whole panel

                readout = lr.locator(".widget-readout")
                lr_before, src_before, status_before = readout.inner_text(), image.get_attribute("src"), \
                    status.inner_text()
                handle = lr.locator(".noUi-handle").first
                handle.focus()
                handle.press("ArrowRight")
                expect(readout).not_to_have_text(lr_before, timeout=10_000)
                lr_after = readout.inner_text()

                # record every text the status line shows from now on (a 2-step run can be quick)
                status.evaluate("""el => {
                    window.__minirlStatus = [el.innerText];
                    new MutationObserver(() => window.__minirlStatus.push(el.innerText))
                        .observe(el, {childList: true, subtree: true, characterData: true});
                }""")
                run_button.click()
                expect(status).to_contain_text(re.compile(r"finished|failed|error|already|cache"),
                                               timeout=RUN_S * 1000)
                seen = page.evaluate("window.__minirlStatus")
                final = status.inner_text()
                assert "finished" in final, f"the run did not finish: {final!r} (status texts seen: {seen})"
                assert any(re.search(r"training|^step \d+ /", s) for s in seen), f"no training status shown: {seen}"
                expect(image).not_to_have_attribute("src", src_before, timeout=RUN_S * 1000)
                expect(run_button).to_be_enabled()
                timings["run"] = time.monotonic() - t0
                panel.screenshot(path=str(artifacts / "after.png"))
                page.screenshot(path=str(artifacts / "after-page.png"))  # the Lab window around it
                print(f"lr {lr_before} -> {lr_after}; status {status_before!r} -> {final!r}; seen {seen}; "
                      f"timings (s since start) {({k: round(v, 1) for k, v in timings.items()})}")
                kernel_errors = [c for c in console if "Error" in c and "favicon" not in c]
                if kernel_errors:
                    print("browser console errors:\n" + "\n".join(kernel_errors[:20]))
            except BaseException:
                if page is not None:
                    try:
                        page.screenshot(path=str(artifacts / "failure.png"), full_page=True)
                    except Exception:
                        pass
                raise
            finally:
                context.close()
    except BaseException:
        (artifacts / "jupyterlab.log").write_text(server.log_tail(400))
        raise
    finally:
        server.stop()
        if notebook.read_bytes() != on_disk:  # autosave is off: Lab must not save the SMOKE run over the lesson
            pytest.fail(f"{notebook} changed on disk during the browser check (git diff / git checkout it)")
