"""What the runner runs in the user's kernel (or beside it, for previews), as source text.

Everything here runs without the data folder on the path (see DATA_OFF): files that land in
/mnt/data without any code being allowed to run must not stand in for a module.
"""

from __future__ import annotations

from pathlib import Path

# The kernel's sys.path without the data folder, relative entries or anything under /tmp,
# for everything that is not the user's code: the kernel's set-up, the warm-up's imports
# and the workspace scripts (and the variables they load). Files can land in /mnt/data
# without any code being allowed to run (attachments, a restored workspace's files), and
# even last on the path a file there would be found for a module that is not installed
# (pandas tries `bottleneck` and `numexpr`) or beat a namespace package (`mpl_toolkits/`).
# The folder joins the path, last, in the first user cell once the warm-up is over (see
# KERNEL_SETUP), so a module the user saved (helpers.py) imports by its name then, and none
# can stand in for an installed one. The kernel starts with -P, so that its working folder
# is not on the path while it starts either, and -s, so that no user site folder is. An
# expression for the scripts below, with os and sys imported.
DATA_OFF = (
    "[e for e in sys.path if e.startswith('/') and not "
    "(os.path.realpath(e) + '/').startswith(('/mnt/data/', '/tmp/'))]"
)
# Runs silently in the kernel before any user code, and returns at once: the data stack (the
# modules of PRELOAD, from CELLMATE_PRELOAD) is imported and warmed up in a thread of the
# kernel, so a sandbox is ready (and a session's
# first run starts) without waiting for it, while the first chart still finds it loaded
# (code that imports the same modules meanwhile waits for the import to finish). The
# thread stays away from pyplot's figures, which belong to the user's code; chart sizes come
# from the matplotlibrc that the runner writes. A cell that imports (or may import: magics,
# exec) waits for the warm-up to end before it starts: two threads importing at once can
# deadlock Python's import locks (importing pyplot imports the inline backend, which imports
# pyplot), and such code would mostly wait for the data stack's imports anyway. A cell
# without imports runs at once. DataFrames also come as Table
# Schema beside their HTML, whichever thread imported pandas first. It binds no names in
# the user's namespace.
KERNEL_SETUP = """
def _cellmate_setup(mark, preload):
    import ast, os, signal, sys, threading
    # No terminal hangs up here; but the runner stops the kernel between runs, and when a
    # process it killed leaves the kernel's process group orphaned, the system sends the
    # group SIGHUP (see settle).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.path[:] = DATA_OFF
    # The installation's CA (allowlist mode with secrets): trusted besides the usual ones, by
    # Python's ssl, requests, pip and curl, in this kernel and what it starts.
    extra = os.environ.pop("CELLMATE_TRUSTED_CA", "")
    if extra:
        usual = "/etc/ssl/certs/ca-certificates.crt"
        bundle = "/tmp/cellmate-trust.pem"
        with open(usual) as found, open(bundle, "w") as out:
            out.write(found.read() + "\\n" + extra + "\\n")
        os.chmod(bundle, 0o444)
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE"):
            os.environ[name] = bundle
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName

    class TableSchemaFormatter(BaseFormatter):
        print_method = ObjectName("_repr_data_resource_")
        _return_type = (dict,)

        def __call__(self, obj):
            if not hasattr(type(obj), "_repr_data_resource_"):
                return None
            pandas = sys.modules.get("pandas")
            option = getattr(pandas, "get_option", None)
            if option is not None and not option("display.html.table_schema"):
                pandas.set_option("display.html.table_schema", True)
            return super().__call__(obj)

    formatters = get_ipython().display_formatter.formatters
    formatters["application/vnd.dataresource+json"] = TableSchemaFormatter()

    # A figure's chart data and a DataFrame's columns (runner/charts.py, loaded from its
    # file on first use, so that a session that never draws never imports it), in the same
    # bundle as the PNG or the HTML. What fails to be read back leaves no entry: the
    # display itself never fails.
    loaded = {}

    def charts():
        if "module" not in loaded:
            import importlib.util
            spec = importlib.util.spec_from_file_location("_cellmate_charts", CHARTS_PATH)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded["module"] = module
        return loaded["module"]

    # Matched by the names of the object's classes, not registered by type: the inline
    # backend drops every formatter's entry for Figure when it is set up.
    class JSONFormatter(BaseFormatter):
        _return_type = (dict,)

        def __init__(self, classes, read, **kwargs):
            super().__init__(**kwargs)
            self.classes, self.read = classes, read

        def __call__(self, obj):
            names = {(getattr(c, "__module__", ""), c.__name__) for c in type(obj).__mro__}
            if not self.enabled or names.isdisjoint(self.classes):
                return None
            import warnings
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return self.read(obj)
            except Exception:
                return None

    for mime, classes, read in (
        (
            "application/vnd.cellmate.chart+json",
            {("matplotlib.figure", "Figure")},
            lambda figure: charts().figure_chart(figure),
        ),
        (
            "application/vnd.cellmate.columns+json",
            {("pandas", "DataFrame"), ("pandas.core.frame", "DataFrame")},
            lambda frame: charts().frame_columns(frame),
        ),
    ):
        formatters[mime] = JSONFormatter(classes, read, format_type=mime)

    def show_inline():
        # A sandbox has no image viewer: Pillow's Image.show() shows the picture in the
        # answer instead, as a chart is.
        from PIL import ImageShow

        class Inline(ImageShow.Viewer):
            def show(self, image, **options):
                from IPython.display import display
                display(image)
                return 1

        ImageShow.register(Inline(), order=-1)

    def warm_up():
        try:
            show_inline()
        except Exception:
            pass
        try:
            if "numpy" in preload:
                import numpy
            if "pandas" in preload:
                import pandas
                pandas.set_option("display.html.table_schema", True)
            if "matplotlib" in preload:
                import matplotlib.pyplot
                from matplotlib.backends.backend_agg import FigureCanvasAgg
                from matplotlib.figure import Figure
                figure = Figure()
                FigureCanvasAgg(figure)
                figure.add_subplot().plot([0, 1], [0, 1])
                figure.canvas.draw()
        finally:
            open(mark, "w").close()

    warming = threading.Thread(target=warm_up, name="cellmate-warm-up", daemon=True)
    warming.start()

    # pre_run_cell and post_run_cell fire for the user's cells only (the runner's own
    # scripts run silent): the data folder joins the path, last, in the first user cell
    # that runs once the warm-up is over, so the warm-up's imports never see it.
    user_cell, data_added = [False], [False]

    def user_cell_starts(info):
        user_cell[0] = True

    def user_cell_ends(result):
        user_cell[0] = False

    get_ipython().events.register("pre_run_cell", user_cell_starts)
    get_ipython().events.register("post_run_cell", user_cell_ends)

    class FinishWarmUpBeforeImports(ast.NodeTransformer):
        def visit(self, tree):
            if warming.is_alive() and any(map(imports, ast.walk(tree))):
                try:
                    warming.join(WARM_JOIN_S)
                except KeyboardInterrupt:
                    # Stopped while waiting: the cell stops as any interrupted cell does,
                    # before any of its code ran.
                    stop = ast.Raise(exc=ast.Name(id="KeyboardInterrupt", ctx=ast.Load()))
                    return ast.fix_missing_locations(ast.Module(body=[stop], type_ignores=[]))
            if user_cell[0] and not data_added[0] and not warming.is_alive():
                data_added[0] = True
                if "/mnt/data" not in sys.path:
                    sys.path.append("/mnt/data")
            return tree

    def imports(node):
        name = getattr(node, "id", None) or getattr(node, "attr", None) or ""
        return isinstance(node, (ast.Import, ast.ImportFrom)) or "import" in name or name in (
            "get_ipython", "exec", "eval", "compile", "help"
        )

    get_ipython().ast_transformers.append(FinishWarmUpBeforeImports())
_cellmate_setup(WARM_MARK_PATH, PRELOAD)
del _cellmate_setup
""".replace("CHARTS_PATH", repr(str(Path(__file__).with_name("charts.py"))))
# What the warm-up may import, from CELLMATE_PRELOAD (comma-separated; the host sets it, and
# by default leaves pandas out under gVisor, where its libraries cost each sandbox ~30 MB).
PRELOADABLE = ("numpy", "pandas", "matplotlib")
MATPLOTLIBRC = "figure.dpi: 100\nsavefig.dpi: 100\nfigure.figsize: 8, 5\n"
# The warm-up thread leaves this mark when it is done, and the runner then says `warm`
# (a warm pool hands out only sandboxes that are). Code that makes it early only makes its
# own sandbox count as warm sooner.
WARM_MARK = Path("/tmp/cellmate-warm")  # noqa: S108 (the sandbox's own private tmpfs)
WARM_POLL_S = 0.02
WARM_LIMIT_S = 120
# How long the client waits, after a cell's reply, for the rest of its output. Output still
# on its way when this runs out is lost without a word, so it is generous: the host's own
# time limit is what ends a run.
IOPUB_GRACE_S = 120


# Reads untrusted files with pandas in a separate process (not the user's kernel, whose
# state it must not touch), and prints one JSON object: path -> preview text.
PREVIEW_SCRIPT = r"""
import json, sys
import pandas as pd
ROWS = 5
def read(path):
    lower = path.lower()
    if lower.endswith(".tsv"):
        return pd.read_csv(path, sep="\t", nrows=1000)
    if lower.endswith(".csv"):
        return pd.read_csv(path, nrows=1000, sep=None, engine="python")
    if lower.endswith(".xlsx"):
        return pd.read_excel(path, nrows=1000)
    if lower.endswith(".jsonl"):
        return pd.read_json(path, lines=True, nrows=1000)
    if lower.endswith(".json"):
        return pd.read_json(path)
    if lower.endswith(".parquet"):
        return pd.read_parquet(path)
    raise ValueError("not a tabular file")
previews = {}
for path in sys.argv[1:]:
    try:
        frame = read(path)
        rows = f"{len(frame)} rows" if len(frame) < 1000 else "1000+ rows"
        columns = ", ".join(f"{name} ({dtype})" for name, dtype in frame.dtypes.astype(str).items())
        with pd.option_context("display.width", 120, "display.max_columns", 20):
            head = frame.head(ROWS).to_string(max_colwidth=40)
        previews[path] = f"{path}: {rows}, {frame.shape[1]} columns: {columns}\n{head}"[:3000]
    except Exception as exc:
        problem = f"{type(exc).__name__}: {str(exc)[:200]}"
        previews[path] = f"{path}: could not be read as a table ({problem})"
print(json.dumps(previews))
"""
# Reaps the kernel's own children that the runner killed at the end of a run (the kernel
# never waits for them itself); only finished ones, so nothing running is touched.
KERNEL_REAP = """
def _cellmate_reap():
    import os
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
_cellmate_reap()
del _cellmate_reap
"""


# Comes before each of the workspace scripts below, which run without the data folder on
# sys.path (whatever an earlier run made of it), so that the modules they and the variables
# import come from the image only.
WITH_DATA_OFF = """
def _cellmate_with_data_off(work):
    import os, sys
    kept = sys.path[:]
    sys.path[:] = DATA_OFF
    try:
        work()
    finally:
        sys.path[:] = kept
""".replace("DATA_OFF", DATA_OFF)

# Saves the user's variables, each pickled on its own (cloudpickle, so functions and classes
# defined in the session come along), into FOLDER: what cannot be saved is named with why.
SNAPSHOT_CODE = """
def _cellmate_snapshot(folder, limit):
    import io, json, os, pickle, socket, threading, types
    import cloudpickle
    shell = get_ipython()
    hidden = set(shell.user_ns_hidden)
    def why(value, exc):
        if isinstance(value, socket.socket) or 'connection' in type(value).__name__.lower():
            return 'an open connection'
        if isinstance(value, io.IOBase):
            return 'an open file'
        if isinstance(value, (types.GeneratorType, types.CoroutineType)):
            return 'a running generator'
        if isinstance(value, type(threading.Lock())) or isinstance(value, threading.Thread):
            return 'a thread or lock'
        return f'cannot be saved: {type(exc).__name__}'
    secrets = [bytes.fromhex(secret) for secret in SECRETS]
    saved, skipped, blobs, total = [], {}, {}, 0
    for name, value in list(shell.user_ns.items()):
        if name.startswith('_') or name in hidden:
            continue
        if isinstance(value, types.ModuleType):
            skipped[name] = 'a module: import it again'
            continue
        try:
            blob = cloudpickle.dumps(value)
        except Exception as exc:
            skipped[name] = why(value, exc)
            continue
        if any(secret in blob for secret in secrets):
            skipped[name] = 'holds an answer to getpass(), which is never saved'
            continue
        if total + len(blob) > limit:
            skipped[name] = f'too large ({len(blob) / 1e6:.1f} MB, past the workspace cap)'
            continue
        blobs[name] = blob
        total += len(blob)
        saved.append(name)
    with open(os.path.join(folder, 'variables.pkl'), 'wb') as out:
        pickle.dump(blobs, out)
    with open(os.path.join(folder, 'report.json'), 'w') as out:
        json.dump({'saved': saved, 'skipped': skipped}, out)
_cellmate_with_data_off(lambda: _cellmate_snapshot(FOLDER, LIMIT))
del _cellmate_snapshot, _cellmate_with_data_off
"""

# Loads variables saved by SNAPSHOT_CODE (in an earlier sandbox of the same conversation)
# into the user's namespace, each on its own: one that fails is named, the rest still load.
RESTORE_CODE = """
def _cellmate_restore(folder):
    import json, os, pickle
    import cloudpickle
    namespace = get_ipython().user_ns
    with open(os.path.join(folder, 'variables.pkl'), 'rb') as saved:
        blobs = pickle.load(saved)
    restored, failed = [], {}
    for name, blob in blobs.items():
        try:
            namespace[name] = cloudpickle.loads(blob)
            restored.append(name)
        except Exception as exc:
            failed[name] = f'{type(exc).__name__}: {str(exc)[:100]}'
    with open(os.path.join(folder, 'report.json'), 'w') as out:
        json.dump({'restored': restored, 'failed': failed}, out)
_cellmate_with_data_off(lambda: _cellmate_restore(FOLDER))
del _cellmate_restore, _cellmate_with_data_off
"""


# A clone of a template snapshot starts with the template's generators: the global ones are
# drawn afresh from the system's entropy (which gVisor's restored sandbox reads from the
# host), so no two clones repeat each other's numbers.
RESEED_CODE = """
import sys as _cellmate_sys, random as _cellmate_random
_cellmate_random.seed()
if "numpy" in _cellmate_sys.modules:
    _cellmate_sys.modules["numpy"].random.seed()
del _cellmate_sys, _cellmate_random
"""
