"""The fallback command policy: each destructive pattern is refused by its named rule, and
ordinary work in the workspace is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from code_runner.tools.command_policy import check_command

SOURCE = Path("/src/repo")
WS = Path("/state/ws/wt")

REFUSED = [
    ("git reset --hard", "git_write"),
    ("git clean -fdx", "git_write"),
    ("git push origin main", "git_write"),
    ("git commit -am x", "git_write"),
    ("git -C /elsewhere status", "git_other_repo"),
    ("git --git-dir=../git update-ref HEAD x", "git_other_repo"),
    ("GIT_DIR=/x git log", "git_other_repo"),
    ("git -c alias.st='!sh' st", "git_config_override"),
    ("git --no-pager -c core.fsmonitor=./x status", "git_config_override"),
    ("rm -rf build", "rm_recursive"),
    ("rm -fr /", "rm_recursive"),
    ("sed -i s/a/b/ /etc/hosts", "sed_inplace_outside"),
    ("perl -pi -e s/a/b/ /etc/hosts", "write_outside_workspace"),
    ("dd if=/dev/zero of=disk.img", "dd_write"),
    ("truncate -s 0 calc.py", "truncate"),
    ("shred calc.py", "shred"),
    ("echo x > /src/repo/calc.py", "source_path"),
    ("cat calc.py > /etc/motd", "redirect_outside_workspace"),
    ("echo x &> /tmp/out", "redirect_outside_workspace"),
    ("ls >& /tmp/out", "redirect_outside_workspace"),
    ("echo x >> ~/.bashrc", "redirect_outside_workspace"),
    ("tee -a /etc/passwd < x", "write_outside_workspace"),
    ("cp calc.py /usr/local/bin/", "write_outside_workspace"),
    ("mv /etc/hosts .", "write_outside_workspace"),
    ("touch ../outside", "write_outside_workspace"),
    ("chmod 777 /etc/passwd", "write_outside_workspace"),
    ("timeout 5 rm -f /tmp/x", "write_outside_workspace"),
    ("xargs rm -f /etc/x", "write_outside_workspace"),
    ("find / -name '*.log' -delete", "write_outside_workspace"),
    ("echo $(rm -f /var/x)", "write_outside_workspace"),
    ("cd /tmp && make", "cd_outside_workspace"),
    ("cd .. && ls", "cd_outside_workspace"),
    ("sudo make install", "privilege"),
    ("env A=1 nsenter -t 1 -m", "privilege"),
    ("unshare -r sh", "privilege"),
    ("shutdown -h now", "system_change"),
    ("systemctl stop sshd", "system_change"),
    ("crontab -r", "system_change"),
    ("kill -9 -1", "kill_all"),
    ("ln -s /tmp link", "link_outside_workspace"),
    ("ln /etc/passwd hard", "link_outside_workspace"),
    ("cp -s /etc/passwd x", "link_outside_workspace"),
    ("chmod 000 .git", "git_dir_path"),
    ("mv -fT link .git", "git_dir_path"),
    ("rm -f .git", "git_dir_path"),
    ("echo 'gitdir: /x' > .git", "git_dir_path"),
    ("touch .GIT/config", "git_dir_path"),
    ("pkill -f python", "kill_all"),
]

ALLOWED = [
    "python -m pytest -q",
    "git status --short",
    "git diff HEAD -- calc.py",
    "git log -c -1",
    "ls -la && cat calc.py",
    "echo x > out.txt 2>&1",
    "echo x >/dev/null 2>&1",
    "cp /usr/share/dict/words .",
    "ln -s calc.py link",
    "cat .git",
    "mkdir -p build/x && touch build/x/y",
    "sed -i s/a/b/ calc.py",
    "find . -name '*.pyc' -delete",
    "cd src && make",
    "chmod +x run.sh",
    "rm -f build/old.o",
    "kill %1",
]


@pytest.mark.parametrize(("command", "rule"), REFUSED)
def test_destructive_patterns_are_refused_by_name(command: str, rule: str) -> None:
    block = check_command(command, source_dir=SOURCE, workspace_dir=WS)
    assert block is not None and block.rule == rule, block
    assert block.reason


@pytest.mark.parametrize("command", ALLOWED)
def test_ordinary_work_is_allowed(command: str) -> None:
    assert check_command(command, source_dir=SOURCE, workspace_dir=WS) is None
