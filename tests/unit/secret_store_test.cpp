// SecretStore (src/parent/secrets/secret_store.h): the name and value rules, owner-only enforced
// (a directory or file that group or others may access, a link, another user's, not a regular
// file: each refused with the path and the fix, and the owner-only case accepted), the bound on
// reads, atomic replacement (also while another thread reads), a sorted list of names only, rm.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "parent/secrets/secret_store.h"

namespace basal {
namespace {

namespace fs = std::filesystem;
using std::string_literals::operator""s;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

void WriteRaw(const std::string& path, const std::string& bytes, mode_t mode) {
  { std::ofstream(path, std::ios::binary) << bytes; }
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class SecretStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "basal-secrets-XXXXXX").string();
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    root_ = t;
    dir_ = root_ + "/state/basal/secrets";
  }
  void TearDown() override { fs::remove_all(root_); }
  SecretStore OpenOrDie(bool create = true) {
    auto s = SecretStore::Open(dir_, create);
    if (!s) ADD_FAILURE() << s.error().message;
    return std::move(*s);
  }
  std::string root_;
  std::string dir_;
};

// ---- names and values ----

TEST(SecretRulesTest, NamesAreIdentifiersOfAtMost64Bytes) {
  for (const std::string& good : {"a"s, "_"s, "A_1"s, "example_token"s, "_9"s, std::string(64, 'x')}) {
    EXPECT_TRUE(ValidateSecretName(good).ok()) << good;
  }
  struct Case {
    std::string name;
    std::string says;
  } bad[] = {
      {"", "is empty"},
      {"1abc", "starts with '1'"},
      {"a-b", "has '-' at byte 2"},
      {"a b", "has ' ' at byte 2"},
      {"a.b", "has '.' at byte 2"},
      {"../x", "starts with '.'"},
      {".tmp-x", "starts with '.'"},
      {"a/b", "has '/' at byte 2"},
      {"caf\xc3\xa9", "at byte 4"},
      {"a\nb", "at byte 2"},
      {std::string(65, 'x'), "is 65 bytes"},
  };
  for (const Case& c : bad) {
    auto r = ValidateSecretName(c.name);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_TRUE(Contains(r.error().message, c.says)) << c.name << ": " << r.error().message;
    EXPECT_TRUE(Contains(r.error().message, "a letter or _, then letters, digits or _, at most 64 bytes"))
        << r.error().message;
  }
}

TEST(SecretRulesTest, ValuesAreOneLineOfAtMost8192BytesWithoutControls) {
  for (const std::string& good : {"x"s, "Bearer abc.def-ghi"s, "with\ttab"s, "caf\xc3\xa9 \xe2\x9c\x93"s, "\x80\xff"s,
                                  std::string(8192, 'v'), " spaced "s}) {
    EXPECT_TRUE(ValidateSecretValue("t", good).ok()) << good;
  }
  // Each bad value holds the marker TOPSECRET: no message may repeat it.
  struct Case {
    std::string value;
    std::string says;
  } bad[] = {
      {"", "the value is empty"},
      {"TOPSECRET" + std::string(8184, 'v'), "the value is 8193 bytes; the limit is 8192"},
      {"TOPSECRET\n", "a line feed (LF) at byte 10 of 10"},
      {"TOPSECRET\r\nX-Injected: 1", "a carriage return (CR) at byte 10"},
      {"TOPSECRET\0x"s, "a NUL byte at byte 10"},
      {"TOPSECRET\x1b[2J", "the control character 0x1b at byte 10"},
      {"TOPSECRET\x7f", "the control character 0x7f"},
      {"\x01TOPSECRET", "the control character 0x01 at byte 1"},
  };
  for (const Case& c : bad) {
    auto r = ValidateSecretValue("example_token", c.value);
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_TRUE(Contains(r.error().message, "secret example_token: ")) << r.error().message;
    EXPECT_TRUE(Contains(r.error().message, c.says)) << r.error().message;
    EXPECT_FALSE(Contains(r.error().message, "TOPSECRET")) << "the message shows the value: " << r.error().message;
  }
}

TEST(SecretRulesTest, TheSecretsDirectoryIsBesideTheJournal) {
  EXPECT_EQ(SecretsDirForJournal("/home/u/.local/state/basal/journal.db"), "/home/u/.local/state/basal/secrets");
  EXPECT_EQ(SecretsDirForJournal("/j.db"), "/secrets");
  EXPECT_EQ(SecretsDirForJournal("run/j.db"), "run/secrets");
  EXPECT_EQ(SecretsDirForJournal("j.db"), "secrets");
}

// ---- the directory ----

TEST_F(SecretStoreTest, OpenCreatesTheDirectoryAndItsParentsOwnerOnlyWhateverTheUmask) {
  const mode_t old = ::umask(0);  // the most permissive umask: 0700 must still be what is made
  auto s = SecretStore::Open(dir_, /*create=*/true);
  ::umask(old);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(ModeOf(dir_), 0700u);
  EXPECT_EQ(ModeOf(root_ + "/state/basal"), 0700u);
  EXPECT_EQ(s->dir(), dir_);
}

TEST_F(SecretStoreTest, OpenWithoutCreateSaysNothingIsStoredYet) {
  auto s = SecretStore::Open(dir_, /*create=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(Contains(s.error().message, dir_)) << s.error().message;
  EXPECT_TRUE(Contains(s.error().message, "basal secret set NAME")) << s.error().message;
  EXPECT_FALSE(fs::exists(dir_));
}

TEST_F(SecretStoreTest, ADirectoryGroupOrOthersMayAccessIsRefusedWithTheFix) {
  fs::create_directories(dir_);
  for (mode_t mode : {0750, 0705, 0701, 0770, 0755, 0777}) {
    ASSERT_EQ(::chmod(dir_.c_str(), mode), 0);
    auto s = SecretStore::Open(dir_, /*create=*/true);
    ASSERT_FALSE(s.ok()) << std::oct << mode;
    EXPECT_EQ(s.error().code, ErrorCode::kRefused);
    EXPECT_TRUE(Contains(s.error().message, "chmod 700 " + dir_)) << s.error().message;
  }
  // The allowed path: the same directory, owner-only.
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  EXPECT_TRUE(SecretStore::Open(dir_, true).ok());
}

TEST_F(SecretStoreTest, ModeIsCheckedAgainAtEveryUseNotOnlyAtOpen) {
  SecretStore s = OpenOrDie();
  ASSERT_TRUE(s.Set("t", "v").ok());
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  for (const Error& e : {s.Get("t").error(), s.Set("t", "w").error(), s.List().error(), s.Remove("t").error()}) {
    EXPECT_EQ(e.code, ErrorCode::kRefused);
    EXPECT_TRUE(Contains(e.message, "chmod 700 " + dir_)) << e.message;
  }
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  EXPECT_EQ(*s.Get("t"), "v");
}

TEST_F(SecretStoreTest, ALinkInTheDirectorysPlaceIsRefusedEvenToAnOwnerOnlyDirectory) {
  const std::string real = root_ + "/real";
  fs::create_directory(real);
  ASSERT_EQ(::chmod(real.c_str(), 0700), 0);
  fs::create_directories(root_ + "/state/basal");
  fs::create_directory_symlink(real, dir_);
  for (bool create : {false, true}) {
    auto s = SecretStore::Open(dir_, create);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.error().code, ErrorCode::kRefused);
    EXPECT_TRUE(Contains(s.error().message, dir_ + " is a symbolic link")) << s.error().message;
  }
  EXPECT_TRUE(SecretStore::Open(real, false).ok());  // the directory itself is fine
}

TEST_F(SecretStoreTest, AFileInTheDirectorysPlaceIsRefused) {
  fs::create_directories(root_ + "/state/basal");
  WriteRaw(dir_, "x", 0600);
  auto s = SecretStore::Open(dir_, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ErrorCode::kRefused);
  EXPECT_TRUE(Contains(s.error().message, "is not a regular file") || Contains(s.error().message, "mkdir -m 700"))
      << s.error().message;
}

TEST_F(SecretStoreTest, AnotherUsersDirectoryOrFileIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a directory to nobody (CI runs as root)";
  SecretStore s = OpenOrDie();
  ASSERT_TRUE(s.Set("t", "v").ok());
  const std::string file = dir_ + "/t";
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  auto got = s.Get("t");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, ErrorCode::kRefused);
  EXPECT_TRUE(Contains(got.error().message, file + " is owned by uid 65534, not by this user (uid 0)"))
      << got.error().message;
  EXPECT_EQ(s.List().error().code, ErrorCode::kRefused);
  ASSERT_EQ(::chown(file.c_str(), 0, 0), 0);
  EXPECT_EQ(*s.Get("t"), "v");  // the allowed path: this user's own file
  ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0);
  auto opened = SecretStore::Open(dir_, false);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, ErrorCode::kRefused);
  EXPECT_TRUE(Contains(opened.error().message, "secrets directory " + dir_ + " is owned by uid 65534"))
      << opened.error().message;
}

// ---- the files ----

TEST_F(SecretStoreTest, SetThenGetGivesTheValueInAnOwnerOnlyFileAndNothingElse) {
  const mode_t old = ::umask(0);
  SecretStore s = OpenOrDie();
  auto set = s.Set("example_token", "Bearer-ish value\twith tab");
  ::umask(old);
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(*s.Get("example_token"), "Bearer-ish value\twith tab");
  EXPECT_EQ(ModeOf(dir_ + "/example_token"), 0600u);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_)) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"example_token"}) << "a temporary file was left behind";
  // The file holds exactly the value.
  std::ifstream f(dir_ + "/example_token", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), "Bearer-ish value\twith tab");
}

TEST_F(SecretStoreTest, SetRefusesABadNameOrValueAndWritesNothing) {
  SecretStore s = OpenOrDie();
  EXPECT_EQ(s.Set("../escape", "v").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.Set("t", "line\nbreak").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.Set("t", std::string(8193, 'v')).error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(fs::is_empty(dir_));
  EXPECT_FALSE(fs::exists(root_ + "/state/escape"));
}

TEST_F(SecretStoreTest, AFileGroupOrOthersMayReadIsRefusedWithTheFix) {
  SecretStore s = OpenOrDie();
  ASSERT_TRUE(s.Set("t", "v").ok());
  const std::string file = dir_ + "/t";
  for (mode_t mode : {0644, 0640, 0604, 0660, 0602}) {
    ASSERT_EQ(::chmod(file.c_str(), mode), 0);
    auto got = s.Get("t");
    ASSERT_FALSE(got.ok()) << std::oct << mode;
    EXPECT_EQ(got.error().code, ErrorCode::kRefused);
    EXPECT_TRUE(Contains(got.error().message, "chmod 600 " + file)) << got.error().message;
    EXPECT_EQ(s.List().error().code, ErrorCode::kRefused);
  }
  ASSERT_EQ(::chmod(file.c_str(), 0400), 0);  // owner-only, read-only: fine
  EXPECT_EQ(*s.Get("t"), "v");
}

TEST_F(SecretStoreTest, ALinkADirectoryOrAFifoInASecretsPlaceIsRefused) {
  SecretStore s = OpenOrDie();
  const std::string elsewhere = root_ + "/elsewhere";
  WriteRaw(elsewhere, "stolen", 0600);
  fs::create_symlink(elsewhere, dir_ + "/linked");
  fs::create_directory(dir_ + "/dir");
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0600), 0);  // no writer: a blocking open would hang
  for (const char* name : {"linked", "dir", "fifo"}) {
    auto got = s.Get(name);
    ASSERT_FALSE(got.ok()) << name;
    EXPECT_EQ(got.error().code, ErrorCode::kRefused) << got.error().message;
    EXPECT_TRUE(Contains(got.error().message, dir_ + "/" + name + " is a")) << got.error().message;
  }
  EXPECT_EQ(s.List().error().code, ErrorCode::kRefused);
  // Set does not write through the link: it replaces the link itself.
  ASSERT_TRUE(s.Set("linked", "mine").ok());
  EXPECT_EQ(*s.Get("linked"), "mine");
  std::ifstream f(elsewhere);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), "stolen");
  // A directory in the name's place is not replaced.
  EXPECT_EQ(s.Set("dir", "v").error().code, ErrorCode::kRefused);
}

TEST_F(SecretStoreTest, AFileLargerThanAValueIsRefusedUnread) {
  SecretStore s = OpenOrDie();
  WriteRaw(dir_ + "/just_right", std::string(8192, 'v'), 0600);
  EXPECT_EQ(s.Get("just_right")->size(), 8192u);
  WriteRaw(dir_ + "/one_over", std::string(8193, 'v'), 0600);
  auto over = s.Get("one_over");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(over.error().message, dir_ + "/one_over is 8193 bytes; a value is at most 8192 bytes"))
      << over.error().message;
  // 64 GiB, sparse: refused by its size, which reading it all could not be.
  const int fd = ::open((dir_ + "/huge").c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t{64} << 30), 0);
  ::close(fd);
  auto huge = s.Get("huge");
  ASSERT_FALSE(huge.ok());
  EXPECT_TRUE(Contains(huge.error().message, "is 68719476736 bytes")) << huge.error().message;
}

TEST_F(SecretStoreTest, AHandWrittenFileWithANewlineIsRefusedWithoutShowingIt) {
  SecretStore s = OpenOrDie();
  WriteRaw(dir_ + "/t", "TOPSECRET\n", 0600);  // what `echo TOPSECRET > t` writes
  auto got = s.Get("t");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(got.error().message, "a line feed (LF) at byte 10")) << got.error().message;
  EXPECT_FALSE(Contains(got.error().message, "TOPSECRET")) << got.error().message;
}

TEST_F(SecretStoreTest, GetOfASecretNotStoredSaysHowToStoreIt) {
  SecretStore s = OpenOrDie();
  auto got = s.Get("example_token");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(Contains(got.error().message, "basal secret set example_token")) << got.error().message;
  EXPECT_EQ(s.Get("bad-name").error().code, ErrorCode::kInvalidArgument);
}

// ---- replacing, listing, removing ----

TEST_F(SecretStoreTest, SetReplacesByRenameSoAnOpenReaderKeepsTheOldValueWhole) {
  SecretStore s = OpenOrDie();
  ASSERT_TRUE(s.Set("t", "old value").ok());
  struct stat before {};
  ASSERT_EQ(::stat((dir_ + "/t").c_str(), &before), 0);
  const int reader = ::open((dir_ + "/t").c_str(), O_RDONLY);
  ASSERT_GE(reader, 0);
  ASSERT_TRUE(s.Set("t", "new").ok());
  EXPECT_EQ(*s.Get("t"), "new");
  // Written in place (truncate, write), the open file would now read "new" or nothing.
  char buf[64];
  const ssize_t n = ::pread(reader, buf, sizeof buf, 0);
  ::close(reader);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "old value");
  struct stat after {};
  ASSERT_EQ(::stat((dir_ + "/t").c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);
  EXPECT_EQ(after.st_mode & 07777, 0600u);
}

TEST_F(SecretStoreTest, AReaderNeverSeesAPartialValueWhileAnotherThreadReplacesIt) {
  SecretStore s = OpenOrDie();
  const std::string a(4000, 'a'), b(17, 'b');
  ASSERT_TRUE(s.Set("t", a).ok());
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(s.Set("t", i % 2 ? a : b).ok());
    writing = false;
  });
  size_t reads = 0;
  while (writing || reads == 0) {
    auto got = s.Get("t");
    ASSERT_TRUE(got.ok()) << got.error().message;
    ASSERT_TRUE(*got == a || *got == b) << "a partial value of " << got->size() << " bytes";
    ++reads;
  }
  writer.join();
  EXPECT_GT(reads, 0u);
}

TEST_F(SecretStoreTest, ListGivesSortedNamesAndIgnoresWhatNoSecretCanBeNamed) {
  SecretStore s = OpenOrDie();
  EXPECT_TRUE(s.List()->empty());
  for (const char* name : {"zeta", "Alpha", "_under", "beta2", "beta10"}) ASSERT_TRUE(s.Set(name, "v").ok());
  WriteRaw(dir_ + "/.tmp-zeta-1-2-3", "partial", 0600);  // a Set that died before its rename
  WriteRaw(dir_ + "/not-a-name", "x", 0644);
  auto names = s.List();
  ASSERT_TRUE(names.ok()) << names.error().message;
  EXPECT_EQ(*names, (std::vector<std::string>{"Alpha", "_under", "beta10", "beta2", "zeta"}));
}

TEST_F(SecretStoreTest, RemoveDeletesAndSaysWhenThereIsNothingToRemove) {
  SecretStore s = OpenOrDie();
  ASSERT_TRUE(s.Set("t", "v").ok());
  ASSERT_TRUE(s.Set("u", "w").ok());
  ASSERT_TRUE(s.Remove("t").ok());
  EXPECT_EQ(s.Get("t").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(*s.List(), std::vector<std::string>{"u"});
  auto again = s.Remove("t");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(Contains(again.error().message, "secret t is not stored in " + dir_)) << again.error().message;
  EXPECT_EQ(s.Remove("../u").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(*s.Get("u"), "w");
}

TEST_F(SecretStoreTest, AStoreMovesWithItsDirectory) {
  SecretStore s = OpenOrDie();
  ASSERT_TRUE(s.Set("t", "v").ok());
  SecretStore moved = std::move(s);
  EXPECT_EQ(*moved.Get("t"), "v");
  auto other = SecretStore::Open(root_ + "/other", true);
  ASSERT_TRUE(other.ok());
  moved = std::move(*other);
  EXPECT_EQ(moved.Get("t").error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace basal
