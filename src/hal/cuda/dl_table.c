/* dl_table.c - opens a library and looks up its functions (dl_table.h). */
#include "hal/cuda/dl_table.h"

#include "base/error.h"

#include <dlfcn.h>
#include <stddef.h>

int gs_dl_load(const char *soname, const char *what, const gs_dl_entry *entries, int count,
               void **library) {
  *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!*library)
    return gs_error(GS_ENOENT, "%s (%s) cannot be loaded: %s", what, soname, dlerror());
  for (int i = 0; i < count; i++)
    if (!(*entries[i].slot = dlsym(*library, entries[i].symbol))) {
      dlclose(*library);
      *library = NULL;
      return gs_error(GS_ENOENT, "%s (%s) lacks %s (a version too old)", what, soname,
                      entries[i].symbol);
    }
  return GS_OK;
}
