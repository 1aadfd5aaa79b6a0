"""`ansible` and `ansible-playbook` runs started from a warm interpreter, for the integration tests.

`run(argv, **kwargs)` takes what `subprocess.run` takes at the tests' call sites and returns what it returns. An
ansible-core command of this interpreter's venv runs in a child forked from a process that has imported ansible-core
once (one such process per pytest worker and ansible environment): the child sets the run's environment, working
directory and output, then calls ansible-core's own command-line entry point (`ansible.cli.playbook.main`,
`ansible.cli.adhoc.main`) with the run's argv. What a run does is what a fresh `ansible-playbook` does; two costs go:
the interpreter's start and imports (about 0.4 CPU s a run) and the module payloads ansible-core builds once per
process (about 0.2 CPU s a module), which it caches in its local temporary directory: the children share it.

A run that does not fit falls back to `subprocess.run` itself: another program, another interpreter's ansible,
input on stdin, an output that is neither a pipe nor discarded, or a run already in flight on the same warm process
(from another thread). Programs that start ansible-playbook themselves (Molecule) get the same through
`shim_environment` (below). GPUNODE_COLD_ANSIBLE=1 sends every run to a fresh process.
"""
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

BIN = os.path.dirname(sys.executable)
COMMANDS = {"ansible": "ansible.cli.adhoc", "ansible-playbook": "ansible.cli.playbook"}
# Read by the interpreter or by ansible-core while it imports (its configuration, the local temporary directory):
# a run whose values differ gets a warm process of its own.
_IMPORT_TIME = ("HOME", "TMPDIR", "LANG")
_IMPORT_TIME_PREFIXES = ("ANSIBLE_", "PYTHON", "LC_")
_MAX_WARM = 4

# The warm process. It imports what every run imports, then forks one child per request: a message on its socket
# (JSON: module, argv, env, cwd) carrying the run's stdin, stdout and stderr. It answers the child's pid, then the
# child's exit status, and ends when the socket closes.
_SERVER = r"""
import atexit, json, os, socket, sys, traceback
modules = json.loads(sys.argv[1])
for name in modules + ["ansible.executor.task_queue_manager", "ansible.executor.playbook_executor",
                       "ansible.executor.task_executor", "ansible.executor.process.worker",
                       "ansible.executor.module_common", "ansible.plugins.strategy.linear",
                       "ansible.plugins.connection.local", "ansible.plugins.action.normal"]:
    __import__(name)
from ansible.utils.path import cleanup_tmp_file
control = socket.socket(fileno=int(sys.argv[2]))


def child(request, fds):
    control.close()
    # This process's local temporary directory (the payload cache) belongs to the warm process, which removes it.
    atexit.unregister(cleanup_tmp_file)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    sys.argv = list(request["argv"])
    try:
        code = sys.modules[request["module"]].main(sys.argv)
    except SystemExit as ended:
        code = ended.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        sys.stderr.write("%s\n" % code)
        code = 1
    atexit._run_exitfuncs()
    return code


while True:
    message, fds, _flags, _address = socket.recv_fds(control, 1 << 22, 3)
    if not message:
        break
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child(json.loads(message), fds)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    for fd in fds:
        os.close(fd)
    control.send(b"%d" % pid)
    control.send(b"%d" % os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


class _Warm(object):
    """One warm process and the socket to it; one run at a time."""

    def __init__(self, env):
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(sorted(COMMANDS.values())), str(theirs.fileno())],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(theirs.fileno(),))
        theirs.close()

    def _answer(self):
        answer = self.socket.recv(64)
        if not answer:
            raise EOFError("the warm ansible process ended")
        return int(answer)

    def run(self, request, fds, timeout):
        """The run's exit status, or None when it ran past timeout (it is killed)."""
        socket.send_fds(self.socket, [json.dumps(request).encode()], fds)
        pid = self._answer()
        self.socket.settimeout(timeout)
        try:
            return self._answer()
        except socket.timeout:
            os.kill(pid, signal.SIGKILL)
            self.socket.settimeout(None)
            self._answer()
            return None
        finally:
            self.socket.settimeout(None)

    def close(self):
        self.socket.close()
        self.process.wait()


_warm = {}
_warm_lock = threading.Lock()


def _key(env):
    return tuple(sorted((name, value) for name, value in env.items()
                        if name in _IMPORT_TIME or name.startswith(_IMPORT_TIME_PREFIXES)))


def _warm_for(env):
    """The warm process for env, its lock taken (released by the caller), or None while it has a run in flight."""
    key = _key(env)
    with _warm_lock:
        warm = _warm.pop(key, None)
        if warm is None or warm.process.poll() is not None:
            warm = _Warm(env)
        _warm[key] = warm  # the most recently used last
        if not warm.lock.acquire(blocking=False):
            return None
        for idle_key in [k for k in _warm if k != key][:max(0, len(_warm) - _MAX_WARM)]:
            if _warm[idle_key].lock.acquire(blocking=False):  # never one with a run in flight
                _warm.pop(idle_key).close()
    return warm


@atexit.register
def _close_all():
    with _warm_lock:
        while _warm:
            _warm.popitem()[1].close()


def _command(argv, env):
    program = argv[0] if os.path.dirname(argv[0]) else shutil.which(argv[0], path=env.get("PATH"))
    if not program or os.path.dirname(os.path.abspath(program)) != BIN:
        return None
    return COMMANDS.get(os.path.basename(program))


def run(argv, env=None, cwd=None, stdout=None, stderr=None, universal_newlines=None, text=None, timeout=None,
        check=False, **kwargs):
    """subprocess.run(argv, ...), an ansible-core command of this venv from a warm interpreter."""
    argv = [str(arg) for arg in argv]
    env = dict(os.environ if env is None else env)
    module = None if kwargs or os.environ.get("GPUNODE_COLD_ANSIBLE") else _command(argv, env)
    pipes = (subprocess.PIPE, subprocess.DEVNULL)
    warm = None
    if module is not None and stdout in pipes and stderr in pipes + (subprocess.STDOUT,):
        warm = _warm_for(env)
    if warm is None:
        return subprocess.run(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr,
                              universal_newlines=universal_newlines, text=text, timeout=timeout, check=check,
                              **kwargs)
    request = {"module": module, "argv": argv, "env": env, "cwd": os.path.abspath(cwd or os.getcwd())}
    try:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, open(os.devnull, "r+b") as null:
            streams = {subprocess.PIPE: None, subprocess.DEVNULL: null}
            fds = [null.fileno(), (streams.get(stdout) or out).fileno()]
            fds.append(fds[1] if stderr == subprocess.STDOUT else (streams.get(stderr) or err).fileno())
            try:
                code = warm.run(request, fds, timeout)
            except (EOFError, OSError):
                warm.process.kill()
                raise
            output = []
            for handle in (out, err):
                handle.seek(0)
                data = handle.read()
                if universal_newlines or text:  # as subprocess.run's text mode reads it
                    data = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
                output.append(data)
    finally:
        warm.lock.release()
    captured_out = output[0] if stdout == subprocess.PIPE else None
    captured_err = output[1] if stderr == subprocess.PIPE else None
    if code is None:
        raise subprocess.TimeoutExpired(argv, timeout, output=captured_out, stderr=captured_err)
    proc = subprocess.CompletedProcess(argv, code, captured_out, captured_err)
    if check:
        proc.check_returncode()
    return proc


# Programs that start `ansible-playbook` themselves (Molecule) find SHIMS first on PATH: each shim hands its argv,
# environment, working directory and standard streams to the relay of this process, which runs them from a warm
# interpreter and answers the exit status (warm_bin/ansible-playbook).
SHIMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_bin")
_relay_address = None


def shim_environment(env):
    """env for a program whose ansible runs are to start warm: the shims first on PATH, and the relay's socket."""
    global _relay_address
    if os.environ.get("GPUNODE_COLD_ANSIBLE"):
        return dict(env)
    with _warm_lock:
        if _relay_address is None:
            directory = tempfile.mkdtemp(prefix="gpunode-warm-relay-")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            listener.bind(os.path.join(directory, "socket"))
            listener.listen(8)
            threading.Thread(target=_relay_accept, args=(listener,), daemon=True).start()
            _relay_address = listener.getsockname()
            atexit.register(shutil.rmtree, directory, True)
    return dict(env, PATH=os.pathsep.join([SHIMS, env.get("PATH", "")]), GPUNODE_WARM_ANSIBLE=_relay_address)


def _relay_accept(listener):
    while True:
        connection = listener.accept()[0]
        threading.Thread(target=_relay_one, args=(connection,), daemon=True).start()


def _relay_one(connection):
    """One shim's run. The relay declines ("cold": the shim runs the command itself) only before the run starts; a
    failure after that is the run's own (status 1, said on its stderr), never a second run."""
    with connection:
        message, fds = socket.recv_fds(connection, 1 << 22, 3)[:2]
        try:
            request = json.loads(message)
            env = request["env"]
            # The run sees the environment it would have seen without the shims.
            env.pop("GPUNODE_WARM_ANSIBLE", None)
            env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep) if part != SHIMS)
            request["module"] = _command(request["argv"], env)
            warm = _warm_for(env) if request["module"] else None
            if warm is None:
                code = "cold"
            else:
                try:
                    code = warm.run(request, fds, None)
                except (EOFError, OSError) as error:
                    warm.process.kill()
                    os.write(fds[2], ("warm ansible relay: the run's warm process failed: %s\n" % error).encode())
                    code = 1
                finally:
                    warm.lock.release()
        finally:
            for fd in fds:
                os.close(fd)
        connection.send(str(code).encode())
