#include "src/util/graphviz.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace reprise::util {
namespace {

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

absl::Status Errno(absl::string_view call) {
  return absl::InternalError(absl::StrCat("running Graphviz 'dot': ", call, ": ", strerror(errno)));
}

absl::Status DotNotFound() {
  return absl::FailedPreconditionError("Graphviz 'dot' not found on PATH; use --format dot");
}

absl::Status WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, std::string& out) {
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("read");
    if (n == 0) return absl::OkStatus();
    out.append(buffer, static_cast<size_t>(n));
  }
}

}  // namespace

std::string FindDotProgram() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    // POSIX: an empty PATH entry means the current directory.
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/dot");
    struct stat info;
    if (stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

absl::Status CheckDotAvailable() {
  return FindDotProgram().empty() ? DotNotFound() : absl::OkStatus();
}

absl::StatusOr<std::string> RenderSvg(absl::string_view dot_text) {
  const std::string program = FindDotProgram();
  if (program.empty()) return DotNotFound();

  // Standard input and error are anonymous files, standard output a pipe that we drain until dot
  // exits: nothing can fill up while the other side waits, whatever the sizes.
  Fd input(memfd_create("reprise-dot-in", MFD_CLOEXEC));
  Fd errors(memfd_create("reprise-dot-err", MFD_CLOEXEC));
  if (input.get() < 0 || errors.get() < 0) return Errno("memfd_create");
  if (absl::Status s = WriteAll(input.get(), dot_text); !s.ok()) return s;
  if (lseek(input.get(), 0, SEEK_SET) != 0) return Errno("lseek");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Errno("pipe2");
  Fd read_end(pipe_fds[0]);
  Fd write_end(pipe_fds[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, input.get(), STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, errors.get(), STDERR_FILENO);
  std::string arg0 = "dot", arg1 = "-Tsvg";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start Graphviz '", program, "': ", strerror(spawned)));
  }
  write_end.Reset();  // Only dot holds the write end now, so EOF means dot is done writing.

  std::string svg;
  const absl::Status read = ReadAll(read_end.get(), svg);
  int wait_status = 0;
  while (waitpid(pid, &wait_status, 0) < 0) {
    if (errno != EINTR) return Errno("waitpid");
  }
  if (!read.ok()) return read;
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    std::string message;
    if (lseek(errors.get(), 0, SEEK_SET) == 0) (void)ReadAll(errors.get(), message);
    return absl::InternalError(absl::StrCat("Graphviz '", program, "' failed (",
                                            WIFEXITED(wait_status)
                                                ? absl::StrCat("exit ", WEXITSTATUS(wait_status))
                                                : absl::StrCat("signal ", WTERMSIG(wait_status)),
                                            "): ", message));
  }
  return svg;
}

}  // namespace reprise::util
