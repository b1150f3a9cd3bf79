// An environment variable set for the life of a test's object, then restored: for the settings
// reprise reads from the environment (REPRISE_CACHE_DIR, PATH for Graphviz, ...).
#ifndef REPRISE_TESTS_CPU_SCOPED_ENV_H_
#define REPRISE_TESTS_CPU_SCOPED_ENV_H_

#include <cstdlib>
#include <optional>
#include <string>

namespace reprise::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace reprise::testing

#endif  // REPRISE_TESTS_CPU_SCOPED_ENV_H_
