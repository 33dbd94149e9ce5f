/* STEP_REGISTRY to STEP_APPROVAL (steps.h): the registry, the credential,
   the scope and tool_policy.
   Approval is the host's decision (anchor.approve), never read here from a
   terminal or the environment; without one, a write tool is not approved. */
#include "policy.h"

#include "callint.h"
#include "pipeline.h"

#include <string.h>

static int listed(const pm_strings *list, const char *s) {
  for (int i = 0; i < list->n; i++)
    if (strcmp(list->items[i], s) == 0) return 1;
  return 0;
}

static int agent_allows(const pm_agent *ag, const pm_tool *t) {
  for (int i = 0; i < ag->tools.n; i++)
    if (ag->tools.items[i] == t) return 1;
  return 0;
}

/* anchor.approve(tool, agent) -> true to run; false and a reason: no one
   could be asked. 1 approved (or by a person's decision, cl_set_approved),
   0 denied, -1 no one could be asked. */
static int approved(lua_State *T, cl_call *c, const pm_agent *ag) {
  if (c->person_approved) return 1;
  if (!c->pg->has_approve) return -1;
  pl_push_anchor(T, c->pg, "approve");
  lua_pushstring(T, c->t->name);
  lua_pushstring(T, ag->name);
  int ran = lua_pcall(T, 2, 2, 0) == LUA_OK;
  int yes = ran && lua_toboolean(T, -2), cannot = ran && !yes && lua_type(T, -1) == LUA_TSTRING;
  lua_pop(T, ran ? 2 : 1);
  return yes ? 1 : cannot ? -1 : 0;
}

st_verdict st_module_closed(lua_State *T, cl_call *c) {
  return st_fail(T, LE_TOOL_NOT_FOUND, "'%s' is not registered in the tool registry: its tool module was closed.",
                 c->t->name);
}

st_verdict st_permissions(lua_State *T, cl_call *c) {
  const pm_tool *t = c->t;
  const pm_agent *ag = c->scope ? c->scope->agent : NULL;
  pl_program *pg = c->pg;
  /* a built-in tool is every agent's: only an ask can name it */
  if (ag && !t->builtin && !agent_allows(ag, t))
    return st_fail(T, le_msg_code(LE_MSG_NOT_ALLOWED_DIRECTLY), le_msg_template(LE_MSG_NOT_ALLOWED_DIRECTLY), ag->name,
                   t->name);
  if (pg->kind[t->index] == PL_NONE)
    return st_fail(T, LE_TOOL_NOT_FOUND, le_template(LE_TOOL_NOT_FOUND), t->name);
  if (pg->kind[t->index] == PL_MODULE && sx_closed(pg->module[t->index]))
    return st_module_closed(T, c);
  if (t->credential) {
    int set = pl_lookup(T, pg, t->credential) != NULL;
    lua_pop(T, 1);
    if (!set)
      return st_fail(T, le_msg_code(LE_MSG_MISSING_CREDENTIAL), le_msg_template(LE_MSG_MISSING_CREDENTIAL), t->name,
                     t->credential);
  }
  if (ag && t->scope && ag->tool_scopes.present && !listed(&ag->tool_scopes, t->scope))
    return st_fail(T, le_msg_code(LE_MSG_SCOPE_DENIED), le_msg_template(LE_MSG_SCOPE_DENIED), t->name, t->scope);
  if (ag && t->side_effects == SE_WRITE && ag->tool_policy == POL_DENY_WRITE)
    return st_fail(T, le_msg_code(LE_MSG_DENY_WRITE), le_msg_template(LE_MSG_DENY_WRITE), t->name, ag->name);
  int yes = ag && t->side_effects == SE_WRITE && ag->tool_policy == POL_APPROVAL ? approved(T, c, ag) : 1;
  /* a durable ask's run waits for a person instead (askjournal.h) */
  if (yes < 0 && c->run_id[0])
    return st_fail(T, LE_TOOL_AWAITING_APPROVAL,
                   "Tool '%s' writes and needs a person's approval (agent '%s' has tool_policy approval), and no one "
                   "can be asked here.", t->name, ag->name);
  if (yes != 1)
    return st_fail(T, LE_TOOL_PERMISSION_DENIED,
                   "Tool '%s' writes and was not approved: list it in LUMA_APPROVED_TOOLS (agent '%s' has tool_policy approval).",
                   t->name, ag->name);
  return sv_next();
}
