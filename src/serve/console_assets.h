// The web console's files (src/serve/console/: its page, scripts and styles), built into basal:
// cmake/embed_files.cmake writes their bytes into a source of the build tree at build time.
//
//   for (const EmbeddedFile& f : ConsoleAssets()) if (f.name == "app.js") Serve(f.bytes, f.etag);
#pragma once

#include <span>
#include <string_view>

namespace basal::serve {

struct EmbeddedFile {
  std::string_view name;   // the path under src/serve/console/: "index.html", "app.js"
  std::string_view bytes;
  std::string_view etag;   // the first 16 hex digits of the bytes' SHA-256
};

std::span<const EmbeddedFile> ConsoleAssets();

}  // namespace basal::serve
