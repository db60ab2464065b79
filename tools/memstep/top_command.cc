// `memstep top RUN_DIR`: a live terminal view of a running job.
//
// On a terminal: the alternate screen, redrawn every --interval with plain
// ANSI escape sequences (no curses), the keyboard in raw mode for `q`;
// SIGINT, SIGTERM and SIGHUP quit, SIGWINCH redraws at the new size, SIGTSTP
// (Ctrl-Z) gives the terminal back until SIGCONT. Every exit path restores
// the terminal (its modes, the cursor, the main screen). Not on a terminal:
// plain frames, one per interval, until the run ends. --once: one frame.

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/memstep/cli.h"
#include "tools/memstep/live_view.h"
#include "tools/memstep/options.h"

namespace memstep::cli {
namespace {

// The self-pipe: signal handlers write the signal number, the main loop
// polls it beside the keyboard.
int g_wake[2] = {-1, -1};

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!write(g_wake[1], &b, 1);
  errno = saved;
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string Clock() {
  time_t now = time(nullptr);
  struct tm tm;
  localtime_r(&now, &tm);
  char buf[32];
  strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

int TopError(const std::string& message) {
  std::cerr << "memstep: error: " << message << "\n";
  return kExitError;
}

// The terminal while top owns it: raw keyboard, alternate screen, hidden
// cursor. Restore() is idempotent and called on every way out.
class Terminal {
 public:
  bool Enter() {
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      have_saved_ = true;
      termios raw = saved_;
      raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw);
    }
    active_ = true;
    return WriteAll(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");
  }
  void Restore() {
    if (!active_) return;
    active_ = false;
    WriteAll(STDOUT_FILENO, "\x1b[?25h\x1b[?1049l");
    if (have_saved_) tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_);
  }
  ~Terminal() { Restore(); }
  static void Size(size_t* width, size_t* height) {
    winsize ws;
    *width = 80;
    *height = 24;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      *width = ws.ws_col;
      *height = ws.ws_row;
    }
  }

 private:
  termios saved_{};
  bool have_saved_ = false;
  bool active_ = false;
};

// Reads the model until it has caught up with the traces (a long run's
// traces are read in pieces).
absl::Status CatchUp(analysis::LiveModel& model) {
  for (int i = 0; i < 1024; ++i) {
    absl::Status s = model.Refresh();
    if (!s.ok() || model.caught_up()) return s;
  }
  return absl::OkStatus();
}

int RunInteractive(analysis::LiveModel& model, double interval) {
  Terminal term;
  if (!term.Enter()) return TopError("cannot write to the terminal");
  bool quit = false;
  bool redraw = true;
  const int timeout_ms = static_cast<int>(std::lround(interval * 1000));
  while (!quit) {
    if (redraw) {
      (void)CatchUp(model);  // a directory gone meanwhile: show what is known
      size_t w, h;
      Terminal::Size(&w, &h);
      std::vector<std::string> lines = RenderFrame(model, w, h, Clock());
      std::string out = "\x1b[H";
      for (size_t i = 0; i < lines.size(); ++i) {
        absl::StrAppend(&out, lines[i], "\x1b[K", i + 1 < lines.size() ? "\r\n" : "");
      }
      out += "\x1b[J";
      if (!WriteAll(STDOUT_FILENO, out)) break;  // the terminal is gone (ssh dropped)
      redraw = false;
    }
    pollfd fds[2] = {{g_wake[0], POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    const nfds_t nfds = isatty(STDIN_FILENO) ? 2 : 1;
    int n = poll(fds, nfds, timeout_ms);
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) {
      redraw = true;  // the interval passed
      continue;
    }
    if (fds[0].revents & POLLIN) {
      unsigned char sig;
      while (read(g_wake[0], &sig, 1) == 1) {
        if (sig == SIGWINCH || sig == SIGCONT) {
          redraw = true;
        } else if (sig == SIGTSTP) {
          term.Restore();
          signal(SIGTSTP, SIG_DFL);
          raise(SIGTSTP);  // stops here until SIGCONT
          signal(SIGTSTP, OnSignal);
          if (!term.Enter()) quit = true;
          redraw = true;
        } else {
          quit = true;
        }
      }
    }
    if (nfds > 1 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      char keys[64];
      ssize_t got = read(STDIN_FILENO, keys, sizeof(keys));
      if (got == 0 && (fds[1].revents & POLLHUP)) quit = true;  // the terminal hung up
      for (ssize_t i = 0; i < got; ++i) {
        if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == 3 /* Ctrl-C */) quit = true;
        if (keys[i] == ' ' || keys[i] == 12 /* Ctrl-L */) redraw = true;
      }
    }
  }
  term.Restore();
  return kExitOk;
}

int RunPlain(analysis::LiveModel& model, double interval) {
  const int timeout_ms = static_cast<int>(std::lround(interval * 1000));
  for (bool first = true;; first = false) {
    if (absl::Status s = CatchUp(model); !s.ok()) return TopError(std::string(s.message()));
    std::vector<std::string> lines = RenderFrame(model, 0, 0, Clock());
    std::string out = first ? "" : "\n";
    for (const std::string& l : lines) absl::StrAppend(&out, l, "\n");
    if (!WriteAll(STDOUT_FILENO, out)) return kExitOk;  // the reader went away
    if (model.ended()) return kExitOk;
    pollfd fd = {g_wake[0], POLLIN, 0};
    if (poll(&fd, 1, timeout_ms) > 0) {
      unsigned char sig;
      while (read(g_wake[0], &sig, 1) == 1) {
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return kExitOk;
      }
    }
  }
}

}  // namespace

std::string TopUsage() {
  return "usage: memstep top RUN_DIR [options]\n"
         "\n"
         "A live view of a running job: for each process of RUN_DIR (new ones appear as they\n"
         "start), its step, steps per second, exact live host and device bytes, growth per\n"
         "step (Theil-Sen over the last 50 steps), the step's peak, stage peaks, the call\n"
         "sites growing fastest over the last 16 steps, and the alerts raised. It reads only\n"
         "what the traces gained since the previous refresh. After the job ends it shows\n"
         "the final state and says the run ended.\n"
         "\n"
         "On a terminal: full screen; q (or Ctrl-C) quits, space redraws. Otherwise (a pipe,\n"
         "a file): plain frames, one per interval, until the run ends.\n"
         "\n"
         "options:\n"
         "  --interval SECONDS   refresh period (default 1; 0.1 to 3600)\n"
         "  --once               print one frame and exit (for scripts)\n"
         "  --sites N            growing call sites shown per process (default 5)\n"
         "  --no-symbolize       show module+offset instead of function names\n"
         "  -h, --help           this help\n"
         "\n"
         "exit status: 0 ok, 1 usage error or RUN_DIR unreadable (--once: or no traces)\n";
}

int TopMain(const std::vector<std::string>& args) {
  std::string dir;
  double interval = 1.0;
  bool once = false;
  analysis::LiveOptions options;
  auto usage_error = [](const std::string& m) {
    std::cerr << "memstep: error: " << m << "\n" << TopUsage();
    return kExitError;
  };
  FlagSet flags;
  flags.switches = {"--once", "--no-symbolize"};
  flags.valued = {"--interval", "--sites"};
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(args, flags, [&](const Arg& arg) -> absl::Status {
    if (arg.operand()) {
      if (!dir.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unexpected argument '", arg.value, "' (one RUN_DIR)"));
      }
      dir = arg.value;
    } else if (arg.name == "--once") {
      once = true;
    } else if (arg.name == "--no-symbolize") {
      options.symbolize = false;
    } else if (arg.name == "--interval") {
      if (!absl::SimpleAtod(arg.value, &interval) || !(interval >= 0.1) || interval > 3600) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--interval: '", arg.value, "' is not a number of seconds from 0.1 to 3600"));
      }
    } else {  // --sites
      absl::StatusOr<uint64_t> n = ParseUint(arg.value);
      if (!n.ok() || *n > 100) return absl::InvalidArgumentError("--sites: a number from 0 to 100");
      options.top_sites = static_cast<size_t>(*n);
    }
    return absl::OkStatus();
  });
  if (!parsed.ok()) return usage_error(std::string(parsed.status().message()));
  if (parsed->help) {
    std::cout << TopUsage();
    return kExitOk;
  }
  if (dir.empty()) return usage_error("no run directory given");

  analysis::LiveModel model(dir, options);
  if (absl::Status s = CatchUp(model); !s.ok()) return TopError(std::string(s.message()));
  if (once) {
    if (model.processes().empty()) {
      return TopError(absl::StrCat(dir, ": no memstep traces (*.trace) in directory"));
    }
    std::string out;
    for (const std::string& l : RenderFrame(model, 0, 0, Clock())) absl::StrAppend(&out, l, "\n");
    WriteAll(STDOUT_FILENO, out);
    return kExitOk;
  }

  if (pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) return TopError("pipe failed");
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  const bool tty = isatty(STDOUT_FILENO);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGTSTP, SIGCONT}) {
    if (tty || sig == SIGINT || sig == SIGTERM || sig == SIGHUP) sigaction(sig, &sa, nullptr);
  }
  return tty ? RunInteractive(model, interval) : RunPlain(model, interval);
}

}  // namespace memstep::cli
