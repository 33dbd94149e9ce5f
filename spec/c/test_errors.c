/*
 * base/errors: the catalogue's lookups, and its templates filled by
 * le_format / le_format_msg, as { input, expected } rows.
 */
#include "errors.h"
#include "ctest.h"

typedef struct name_case {
  le_code code;
  const char *name;
  int retryable;
} name_case;

static const name_case names[] = {
  { LE_TOOL_TIMEOUT, "TOOL_TIMEOUT", 0 },
  { LE_TOOL_NOT_FOUND, "TOOL_NOT_FOUND", 0 },
  { LE_TOOL_CANCELLED, "TOOL_CANCELLED", 0 },
  { LE_HTTP_TIMEOUT, "HTTP_TIMEOUT", 1 },
  { LE_AGENT_NOT_FOUND, "AGENT_NOT_FOUND", 0 },
  { LE_VALIDATION_FAILED, "VALIDATION_FAILED", 0 },
};

int main(void) {
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    CT_EQ_STR(names[i].name, le_name(names[i].code));
    CT_CHECK(le_default_retryable(names[i].code) == names[i].retryable, "%s", names[i].name);
  }

  /* every code is found by its name, names are unique and sorted, and each
     has a meaning */
  for (int i = 0; i < LE_NCODES; i++) {
    le_code found = LE_NCODES;
    CT_CHECK(le_lookup(le_name((le_code)i), &found) && found == (le_code)i, "%s", le_name((le_code)i));
    CT_CHECK(le_meaning((le_code)i)[0] != '\0', "%s has no meaning", le_name((le_code)i));
    if (i > 0)
      CT_CHECK(strcmp(le_name((le_code)(i - 1)), le_name((le_code)i)) < 0, "%s after %s",
               le_name((le_code)i), le_name((le_code)(i - 1)));
  }
  CT_CHECK(!le_lookup("TOOL_NOT_REGISTERED", NULL), "TOOL_NOT_REGISTERED is gone");
  CT_CHECK(!le_lookup("tool_timeout", NULL), "names are matched exactly");
  CT_CHECK(!le_lookup(NULL, NULL), "NULL is no name");
  CT_EQ_STR("ERROR", le_name(LE_NCODES));

  char out[256];
  CT_EQ_STR("TOOL_TIMEOUT", le_format(out, sizeof out, LE_TOOL_TIMEOUT, "calculate", 1500LL));
  CT_EQ_STR("Tool 'calculate' timed out after 1500 ms.", out);
  le_format(out, sizeof out, LE_TOOL_NOT_FOUND, "calculate");
  CT_EQ_STR("'calculate' is not registered in the tool registry.", out);
  le_format(out, sizeof out, LE_TOOL_CANCELLED, "fetch");
  CT_EQ_STR("Tool 'fetch' was cancelled.", out);
  le_format(out, sizeof out, LE_TOOL_REGISTRY_CONFLICT, "calculate");
  CT_EQ_STR("Tool registry conflict: calculate.", out);
  le_format(out, sizeof out, LE_METHOD_NOT_FOUND, "Flow", "nope");
  CT_EQ_STR("Agent 'Flow' has no method 'nope'.", out);
  le_format(out, sizeof out, LE_IO_ERROR);
  CT_EQ_STR("", out);
  le_format(out, 8, LE_TOOL_CANCELLED, "fetch");
  CT_EQ_STR("Tool 'f", out);

  CT_CHECK(le_format_msg(out, sizeof out, LE_MSG_MISSING_CREDENTIAL, "db_write", "DB_PASSWORD")
           == LE_TOOL_PERMISSION_DENIED, "the credential message is a permission error");
  CT_EQ_STR("Tool 'db_write' is missing credential: DB_PASSWORD.", out);
  le_format_msg(out, sizeof out, LE_MSG_SCOPE_DENIED, "db_write", "db:write");
  CT_EQ_STR("Tool 'db_write' scope access was denied: db:write.", out);
  CT_CHECK(le_format_msg(out, sizeof out, LE_MSG_WRITE_CACHED, "w") == LE_PROGRAM_INVALID, "a rule");
  CT_EQ_STR("Write tool 'w' cannot use cache.", out);
  return ct_finish("errors");
}
