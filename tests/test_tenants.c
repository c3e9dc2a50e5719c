/* test_tenants.c — tenants against a real lctd: each token confined to its key prefix and quota, the access file reloaded on SIGHUP, ipc trusted unless the file says otherwise. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <sys/stat.h>

#include "lct_wire.h"
#include "lctd_harness.h"
#include "raw_wire.h"
#include "test_util.h"

#define ADMIN_TOKEN "admin-token-0123456789abcdef"
#define ALICE_TOKEN "alice-token-0123456789abcdef"
#define BOB_TOKEN "bob-token-0123456789abcdefgh"
#define CAROL_TOKEN "carol-token-0123456789abcdef"
#define ALICE_QUOTA 307200 /* 300K: three incompressible 100000-byte tensors and change */

static test_lctd daemon_;
static char dir_[96], access_[128], admin_[128], alice_[128], bob_[128], carol_[128], wrong_[128];

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  cr_assert(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
  chmod(path, 0600);
}

static const char alice_and_bob[] = "tenant alice " ALICE_TOKEN " alice/ 300K\n"
                                    "tenant bob " BOB_TOKEN " bob/ unlimited\n";

/* The token files and the access file (contents) in a directory of the test's own. */
static void files(const char *contents) {
  snprintf(dir_, sizeof dir_, "/tmp/lct-tenants-%d", (int)getpid());
  mkdir(dir_, 0700);
  snprintf(access_, sizeof access_, "%s/access", dir_);
  snprintf(admin_, sizeof admin_, "%s/admin", dir_);
  snprintf(alice_, sizeof alice_, "%s/alice", dir_);
  snprintf(bob_, sizeof bob_, "%s/bob", dir_);
  snprintf(carol_, sizeof carol_, "%s/carol", dir_);
  snprintf(wrong_, sizeof wrong_, "%s/wrong", dir_);
  write_file(admin_, ADMIN_TOKEN "\n");
  write_file(alice_, ALICE_TOKEN "\n");
  write_file(bob_, BOB_TOKEN "\n");
  write_file(carol_, CAROL_TOKEN "\n");
  write_file(wrong_, "wrong-token-0123456789abcdef\n");
  write_file(access_, contents);
}

static void start_with(const char *contents, const char *plain) {
  files(contents);
  const char *extra[] = {"--auth-token-file", admin_, "--access-file", access_, "--auth-plain-token", plain,
                         "--memory", "64M", "--frame-size", "64K", NULL};
  test_lctd_start(&daemon_, extra);
}

static void start(void) { start_with(alice_and_bob, "off"); }
static void start_plain(void) { start_with(alice_and_bob, "on"); }
static void start_ipc_too(void) { start_with("endpoints tcp ipc\n" "tenant alice " ALICE_TOKEN " alice/ 1M\n", "off"); }

static void stop(void) {
  test_lctd_stop(&daemon_);
  const char *paths[] = {access_, admin_, alice_, bob_, carol_, wrong_};
  for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
    unlink(paths[i]);
  rmdir(dir_);
}

/* lct_connect with token_file (NULL: none): its return code and *c. */
static int connect_as(const char *endpoint, const char *token_file, lct_client **c) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = endpoint;
  o.auth_token_file = token_file;
  o.timeout_ms = 20000;
  o.connect_timeout_ms = 5000;
  return lct_connect(&o, c);
}

static lct_client *client_as(const char *endpoint, const char *token_file) {
  lct_client *c;
  int rc = connect_as(endpoint, token_file, &c);
  cr_assert_eq(rc, 0, "connect %s with %s: %s", endpoint, token_file ? token_file : "no token", lct_strerror(rc));
  return c;
}

static int put_bytes(lct_client *c, const char *key, const void *data, size_t n, lct_tensor_info *info) {
  uint64_t shape[1] = {n};
  return lct_put(c, key, LCT_DTYPE_RAW, shape, 1, data, n, info);
}

static void put_ok(lct_client *c, const char *key, const void *data, size_t n, lct_tensor_info *info) {
  int rc = put_bytes(c, key, data, n, info);
  cr_assert_eq(rc, 0, "put %s: %s: %s", key, lct_strerror(rc), lct_last_error(c));
}

/* Asserts rc is LCT_EACCES and c's error says text. */
static void refused(lct_client *c, int rc, const char *text, const char *what) {
  cr_assert_eq(rc, LCT_EACCES, "%s: %s (%s)", what, lct_strerror(rc), lct_last_error(c));
  cr_assert(strstr(lct_last_error(c), text) != NULL, "%s: '%s' lacks '%s'", what, lct_last_error(c), text);
}

/* The keys a LIST returns, joined by spaces. */
static void list_keys(lct_client *c, const char *prefix, char *out, size_t cap) {
  lct_list_page *page;
  int rc = lct_list(c, prefix, NULL, 0, &page);
  cr_assert_eq(rc, 0, "list %s: %s", prefix ? prefix : "(all)", lct_last_error(c));
  size_t n = 0;
  out[0] = '\0';
  for (size_t i = 0; i < page->n; i++)
    n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? " " : "", page->entries[i].key);
  lct_list_free(page);
}

Test(tenants, each_sees_and_uses_only_its_prefix, .init = start, .fini = stop) {
  lct_client *alice = client_as(daemon_.tcp, alice_), *bob = client_as(daemon_.tcp, bob_);
  uint8_t data[4096];
  memset(data, 7, sizeof data);
  put_ok(alice, "alice/w", data, sizeof data, NULL);
  put_ok(bob, "bob/w", data, sizeof data, NULL);
  put_ok(bob, "bob/v", data, 100, NULL);
  lct_client *admin = client_as(daemon_.tcp, admin_);
  put_ok(admin, "shared/x", data, 10, NULL);

  uint8_t buf[4096];
  lct_tensor_info info;
  refused(alice, lct_get(alice, "bob/w", buf, sizeof buf, &info), "key 'bob/w' is outside tenant 'alice'", "get");
  cr_assert(strstr(lct_last_error(alice), "its keys start with 'alice/'"), "%s", lct_last_error(alice));
  refused(alice, lct_stat(alice, "bob/w", &info), "outside tenant 'alice'", "stat");
  refused(alice, lct_delete(alice, "bob/w"), "outside tenant 'alice'", "delete");
  refused(alice, put_bytes(alice, "bob/w", data, 1, NULL), "outside tenant 'alice'", "overwrite");
  refused(alice, put_bytes(alice, "shared/y", data, 1, NULL), "outside tenant 'alice'", "a key no tenant has");
  refused(alice, lct_get(alice, "alic", buf, sizeof buf, &info), "outside tenant", "a part of the prefix");
  /* A chunked put (64K frames): begun, sent and committed under the prefix only. */
  uint8_t *big = calloc(1, 200000);
  refused(alice, put_bytes(alice, "bob/big", big, 200000, NULL), "outside tenant 'alice'", "chunked put");
  put_ok(alice, "alice/big", big, 200000, NULL);
  free(big);

  char keys[512];
  list_keys(alice, NULL, keys, sizeof keys);
  cr_assert_str_eq(keys, "alice/big alice/w");
  list_keys(alice, "al", keys, sizeof keys);
  cr_assert_str_eq(keys, "alice/big alice/w", "a shorter prefix widens to the tenant's");
  list_keys(alice, "alice/b", keys, sizeof keys);
  cr_assert_str_eq(keys, "alice/big", "a longer one narrows within it");
  lct_list_page *page;
  refused(alice, lct_list(alice, "bob/", NULL, 0, &page), "prefix 'bob/' is outside tenant 'alice'", "list");
  list_keys(bob, NULL, keys, sizeof keys);
  cr_assert_str_eq(keys, "bob/v bob/w");
  list_keys(admin, NULL, keys, sizeof keys);
  cr_assert_str_eq(keys, "alice/big alice/w bob/v bob/w shared/x", "auth_token_file's token sees every key");

  /* STATS: a tenant's own; SAVE: not for tenants. */
  lct_server_stats st;
  char *text;
  cr_assert_eq(lct_stats(bob, &st, &text), 0, "%s", lct_last_error(bob));
  cr_assert_eq(st.tensors, 2);
  cr_assert_eq(st.raw_bytes, 4096 + 100);
  cr_assert_eq(st.requests, 0, "no server-wide counter");
  cr_assert(strstr(text, "lct_tenant_tensors{tenant=\"bob\"} 2") && !strstr(text, "alice"), "%s", text);
  lct_free(text);
  cr_assert_eq(lct_stats(alice, &st, NULL), 0);
  cr_assert_eq(st.tensors, 2);
  cr_assert_eq(st.pool_capacity, ALICE_QUOTA, "its quota");
  refused(alice, lct_save(alice, NULL), "SAVE is not for tenants", "save");
  cr_assert_eq(lct_stats(admin, &st, &text), 0);
  cr_assert_eq(st.tensors, 5);
  cr_assert(strstr(text, "lct_tenant_tensors{tenant=\"alice\"} 2\nlct_tenant_tensors{tenant=\"bob\"} 2\n"), "%s", text);
  lct_free(text);

  /* Nothing of bob's changed; he deletes his own. */
  cr_assert_eq(lct_get(bob, "bob/w", buf, sizeof buf, &info), 0);
  cr_assert_eq(info.version, 2);
  cr_assert_eq(lct_delete(bob, "bob/w"), 0);
  lct_close(alice);
  lct_close(bob);
  lct_close(admin);
}

Test(tenants, wrong_or_missing_token_refused, .init = start, .fini = stop) {
  lct_client *c;
  cr_assert_eq(connect_as(daemon_.tcp, wrong_, &c), LCT_EACCES, "a token neither tenant has");
  cr_assert_eq(connect_as(daemon_.tcp, NULL, &c), LCT_EACCES, "no token");
  cr_assert_eq(connect_as(daemon_.tcp, carol_, &c), LCT_EACCES, "carol is not in the access file yet");
  /* ipc stays trusted (the socket file's permissions) unless the access file says otherwise. */
  lct_client *ipc = client_as(daemon_.ipc, NULL);
  uint8_t one = 1;
  put_ok(ipc, "anything", &one, 1, NULL);
  lct_close(ipc);
  ipc = client_as(daemon_.ipc, alice_); /* a token there changes nothing */
  put_ok(ipc, "bob/x", &one, 1, NULL);
  lct_close(ipc);
}

Test(tenants, ipc_authenticates_when_the_file_says_so, .init = start_ipc_too, .fini = stop) {
  lct_client *c;
  cr_assert_eq(connect_as(daemon_.ipc, NULL, &c), LCT_EACCES);
  c = client_as(daemon_.ipc, alice_);
  uint8_t one = 1;
  refused(c, put_bytes(c, "bob/x", &one, 1, NULL), "outside tenant 'alice'", "ipc put");
  put_ok(c, "alice/x", &one, 1, NULL);
  lct_close(c);
  c = client_as(daemon_.ipc, admin_);
  put_ok(c, "bob/x", &one, 1, NULL);
  lct_close(c);
}

Test(tenants, quota_of_stored_bytes, .init = start, .fini = stop) {
  lct_client *alice = client_as(daemon_.tcp, alice_);
  test_rng r = {42};
  uint8_t *data = malloc(100000); /* incompressible: stored as about 100150 bytes */
  for (size_t i = 0; i < 100000; i++)
    data[i] = (uint8_t)test_rand(&r);
  lct_tensor_info info;
  uint64_t used = 0;
  char key[32];
  int rc, n = 0;
  for (; n < 10; n++) {
    snprintf(key, sizeof key, "alice/%d", n);
    if ((rc = put_bytes(alice, key, data, 100000, &info)) != 0)
      break;
    used += info.stored_bytes;
  }
  cr_assert_eq(n, 3, "three fit in 300K, %d did", n);
  cr_assert_eq(rc, LCT_ENOSPC, "%s", lct_strerror(rc));
  char want[128];
  snprintf(want, sizeof want, "tenant 'alice' quota of %d bytes: %" PRIu64 " in use, this put needs ", ALICE_QUOTA,
           used);
  cr_assert(strstr(lct_last_error(alice), want), "'%s' lacks '%s'", lct_last_error(alice), want);
  lct_server_stats st;
  cr_assert_eq(lct_stats(alice, &st, NULL), 0);
  cr_assert_eq(st.stored_bytes, used, "a refused put holds nothing");
  /* An overwrite gives its version's bytes back; so does a delete. */
  put_ok(alice, "alice/1", data, 100000, NULL);
  cr_assert_eq(lct_delete(alice, "alice/0"), 0);
  put_ok(alice, "alice/3", data, 100000, NULL);
  cr_assert_eq(put_bytes(alice, "alice/4", data, 100000, NULL), LCT_ENOSPC);
  /* bob has no quota; the pool bounds him only. */
  lct_client *bob = client_as(daemon_.tcp, bob_);
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof key, "bob/%d", i);
    put_ok(bob, key, data, 100000, NULL);
  }
  lct_close(bob);
  free(data);
  lct_close(alice);
}

/* The value of a Prometheus line of the admin's STATS. */
static uint64_t admin_metric(const char *series) {
  lct_client *admin = client_as(daemon_.ipc, NULL);
  uint64_t v = test_metric(admin, series);
  lct_close(admin);
  return v;
}

Test(tenants, sighup_reloads_the_access_file, .init = start, .fini = stop) {
  lct_client *alice = client_as(daemon_.tcp, alice_), *c;
  uint8_t one = 1;
  put_ok(alice, "alice/before", &one, 1, NULL);
  /* Adding a tenant: carol can connect once the reload is done. */
  char contents[512];
  snprintf(contents, sizeof contents, "%stenant carol " CAROL_TOKEN " carol/ 1M\n", alice_and_bob);
  write_file(access_, contents);
  cr_assert_eq(kill(daemon_.pid, SIGHUP), 0);
  int rc = LCT_EACCES;
  for (int i = 0; i < 100 && (rc = connect_as(daemon_.tcp, carol_, &c)) == LCT_EACCES; i++)
    test_sleep_ms(50);
  cr_assert_eq(rc, 0, "carol after the reload: %s", lct_strerror(rc));
  put_ok(c, "carol/x", &one, 1, NULL);
  refused(c, put_bytes(c, "alice/x", &one, 1, NULL), "outside tenant 'carol'", "carol in alice's keys");
  lct_close(c);
  /* alice's connection authenticates again by itself: the credentials changed. */
  put_ok(alice, "alice/after", &one, 1, NULL);
  lct_server_stats st;
  cr_assert_eq(lct_stats(alice, &st, NULL), 0);
  cr_assert_eq(st.tensors, 2, "the tenant's counts survive the reload");

  /* A malformed file: the reload is refused and the running tenants stay. */
  uint64_t failures = admin_metric("lct_config_reload_failures_total ");
  write_file(access_, "tenant carol\n");
  cr_assert_eq(kill(daemon_.pid, SIGHUP), 0);
  for (int i = 0; i < 100 && admin_metric("lct_config_reload_failures_total ") == failures; i++)
    test_sleep_ms(50);
  cr_assert_eq(admin_metric("lct_config_reload_failures_total "), failures + 1);
  c = client_as(daemon_.tcp, carol_);
  put_ok(c, "carol/y", &one, 1, NULL);
  lct_close(c);
  put_ok(alice, "alice/still", &one, 1, NULL);

  /* Removing a tenant ends its connections at once. */
  lct_client *carol = client_as(daemon_.tcp, carol_);
  write_file(access_, alice_and_bob);
  cr_assert_eq(kill(daemon_.pid, SIGHUP), 0);
  for (int i = 0; i < 100 && (rc = connect_as(daemon_.tcp, carol_, &c)) == 0; i++) {
    lct_close(c);
    test_sleep_ms(50);
  }
  cr_assert_eq(rc, LCT_EACCES, "carol's token no longer works");
  refused(carol, put_bytes(carol, "carol/z", &one, 1, NULL), "wrong token", "carol's open connection");
  lct_close(carol);
  lct_close(alice);
}

/* ---- requests no liblct sends: the plain token of old clients ------------ */

/* One request over s, a cooked REQ socket, with the plain token (NULL: none):
 * the reply's status; its put_id and failed_item too. */
static uint32_t plain_call(int s, const char *token, Lctpb__Request *rq, const void *payload, size_t plen,
                           uint64_t *put_id, long *failed) {
  rq->has_auth_token = token != NULL;
  if (token != NULL)
    rq->auth_token = (ProtobufCBinaryData){strlen(token), (uint8_t *)token};
  Lctpb__Reply *rp;
  uint32_t status = test_raw_call(s, rq, payload, plen, &rp);
  if (put_id != NULL)
    *put_id = rp->put_id;
  if (failed != NULL)
    *failed = rp->has_failed_item ? (long)rp->failed_item : -1;
  lctpb__reply__free_unpacked(rp, NULL);
  return status;
}

Test(tenants, plain_tokens_refused_unless_allowed, .init = start, .fini = stop) {
  int s = test_raw_open(daemon_.tcp);
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_PING;
  cr_assert_eq(plain_call(s, ADMIN_TOKEN, &rq, NULL, 0, NULL, NULL), (uint32_t)-LCT_EACCES,
               "auth_plain_token is off by default");
  nn_close(s);
}

/* One connection, and a plain token per request: what one tenant's token
 * began, another's cannot touch. */
Test(tenants, old_clients_confined_too, .init = start_plain, .fini = stop) {
  int s = test_raw_open(daemon_.tcp);
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_PING;
  cr_assert_eq(plain_call(s, ADMIN_TOKEN, &rq, NULL, 0, NULL, NULL), 0, "auth_plain_token on");
  cr_assert_eq(plain_call(s, "wrong-token-0123456789abcdef", &rq, NULL, 0, NULL, NULL),
               (uint32_t)-LCT_EACCES);
  cr_assert_eq(plain_call(s, NULL, &rq, NULL, 0, NULL, NULL), (uint32_t)-LCT_EACCES);
  /* alice begins a chunked put; bob cannot touch it by its id. */
  uint64_t total = 1000, put_id = 0;
  Lctpb__TensorMeta m = LCTPB__TENSOR_META__INIT;
  m.has_dtype = 1;
  m.n_shape = 1;
  m.shape = &total;
  Lctpb__Request b = LCTPB__REQUEST__INIT;
  b.op = LCTPB__OP__OP_PUT_BEGIN;
  b.has_key = 1;
  b.key = (ProtobufCBinaryData){7, (uint8_t *)"alice/p"};
  b.meta = &m;
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &b, NULL, 0, &put_id, NULL), 0);
  b.key = (ProtobufCBinaryData){5, (uint8_t *)"bob/p"};
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &b, NULL, 0, NULL, NULL), (uint32_t)-LCT_EACCES);
  uint8_t chunk[1000] = {0};
  Lctpb__Request k = LCTPB__REQUEST__INIT;
  k.op = LCTPB__OP__OP_PUT_CHUNK;
  k.has_put_id = k.has_offset = 1;
  k.put_id = put_id;
  cr_assert_eq(plain_call(s, BOB_TOKEN, &k, chunk, sizeof chunk, NULL, NULL), (uint32_t)-LCT_ENOENT,
               "another tenant's put is none of bob's");
  k.op = LCTPB__OP__OP_PUT_ABORT;
  k.has_offset = 0;
  cr_assert_eq(plain_call(s, BOB_TOKEN, &k, NULL, 0, NULL, NULL), (uint32_t)-LCT_ENOENT);
  k.op = LCTPB__OP__OP_PUT_CHUNK;
  k.has_offset = 1;
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &k, chunk, sizeof chunk, NULL, NULL), 0);
  k.op = LCTPB__OP__OP_PUT_COMMIT;
  k.has_offset = 0;
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &k, NULL, 0, NULL, NULL), 0);
  /* Device batches check every item's key before they look at the buffer. */
  uint8_t handle[LCT_IPC_HANDLE_BYTES] = {0}, uuid[LCT_GPU_UUID_BYTES] = {0}, boot[LCT_BOOT_ID_BYTES] = {0};
  Lctpb__DeviceBuffer dev = LCTPB__DEVICE_BUFFER__INIT;
  dev.ipc_handle = (ProtobufCBinaryData){sizeof handle, handle};
  dev.gpu_uuid = (ProtobufCBinaryData){sizeof uuid, uuid};
  dev.boot_id = (ProtobufCBinaryData){sizeof boot, boot};
  dev.size = 2000;
  Lctpb__DeviceItem items[2] = {LCTPB__DEVICE_ITEM__INIT, LCTPB__DEVICE_ITEM__INIT}, *ptrs[2] = {&items[0], &items[1]};
  items[0].key = (ProtobufCBinaryData){7, (uint8_t *)"alice/d"};
  items[1].key = (ProtobufCBinaryData){5, (uint8_t *)"bob/d"};
  items[0].size = items[1].size = 1000;
  items[1].offset = 1000;
  Lctpb__Request g = LCTPB__REQUEST__INIT;
  g.op = LCTPB__OP__OP_GET_DEVICE_MANY;
  g.device = &dev;
  g.n_items = 2;
  g.items = ptrs;
  long failed;
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &g, NULL, 0, NULL, &failed), (uint32_t)-LCT_EACCES);
  cr_assert_eq(failed, 1, "the item at fault");
  nn_close(s);
}

/* An encoded chunked put whose commit meets the quota stays staged, as a raw one does: the tenant makes room
 * and commits again, without sending the blobs anew. */
Test(tenants, encoded_commit_refused_for_quota_stays_staged, .init = start_plain, .fini = stop) {
  lct_client *alice = client_as(daemon_.tcp, alice_);
  test_rng r = {7};
  uint8_t *data = malloc(100000); /* incompressible: three fill the quota */
  for (size_t i = 0; i < 100000; i++)
    data[i] = (uint8_t)test_rand(&r);
  put_ok(alice, "alice/0", data, 100000, NULL);
  put_ok(alice, "alice/1", data, 100000, NULL);
  enum { BYTES = 60000 }; /* one blob within a 64K frame */
  uint8_t blob[LCT_ENCODE_BOUND(BYTES, 1)];
  lct_encode_stats st;
  cr_assert_eq(lct_encode(LCT_DTYPE_RAW, NULL, data, BYTES, blob, sizeof blob, &st), 0);
  int s = test_raw_open(daemon_.tcp);
  uint64_t total = BYTES, put_id = 0;
  Lctpb__TensorMeta m = LCTPB__TENSOR_META__INIT;
  m.has_dtype = 1;
  m.n_shape = 1;
  m.shape = &total;
  m.has_checksum = 1;
  m.checksum = lct_checksum(0, data, BYTES);
  Lctpb__Request b = LCTPB__REQUEST__INIT;
  b.op = LCTPB__OP__OP_PUT_BEGIN;
  b.has_key = 1;
  b.key = (ProtobufCBinaryData){7, (uint8_t *)"alice/e"};
  b.meta = &m;
  b.has_encoded = b.encoded = 1;
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &b, NULL, 0, &put_id, NULL), 0);
  Lctpb__Request k = LCTPB__REQUEST__INIT;
  k.op = LCTPB__OP__OP_PUT_CHUNK;
  k.has_put_id = k.has_offset = 1;
  k.put_id = put_id;
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &k, blob, st.blob_bytes, NULL, NULL), 0);
  put_ok(alice, "alice/2", data, 100000, NULL); /* the quota is full by the time the put commits */
  k.op = LCTPB__OP__OP_PUT_COMMIT;
  k.has_offset = 0;
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &k, NULL, 0, NULL, NULL), (uint32_t)-LCT_ENOSPC, "over the quota");
  cr_assert_eq(admin_metric("lct_pending_puts "), 1, "the put stays staged");
  cr_assert_eq(lct_delete(alice, "alice/0"), 0);
  cr_assert_eq(plain_call(s, ALICE_TOKEN, &k, NULL, 0, NULL, NULL), 0, "committed once there is room");
  test_get_equals(alice, "alice/e", data, BYTES);
  cr_assert_eq(admin_metric("lct_pending_puts "), 0);
  nn_close(s);
  free(data);
  lct_close(alice);
}

/* ---- wrong answers to challenges ------------------------------------------ */

/* alice and 999 tenants of 4096-byte tokens: checking one answer hashes more than a second's budget. */
static void start_many_long_tokens(void) {
  enum { FILLERS = 999, LONG = 4096 };
  size_t cap = (size_t)(FILLERS + 1) * (LONG + 64), n = 0;
  char *contents = malloc(cap);
  cr_assert_not_null(contents);
  n += (size_t)snprintf(contents + n, cap - n, "tenant alice " ALICE_TOKEN " alice/ 1M\n");
  for (int i = 0; i < FILLERS; i++) {
    n += (size_t)snprintf(contents + n, cap - n, "tenant t%d %0*d p%d/ 1M\n", i, LONG, i, i);
  }
  start_with(contents, "off");
  free(contents);
}

/* One AUTH on s: a challenge asked for (proof NULL), or a proof answered; its status. */
static uint32_t auth_call(int s, const uint8_t *proof) {
  uint8_t client_nonce[LCT_AUTH_NONCE_BYTES] = {0};
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_AUTH;
  if (proof != NULL) {
    rq.has_auth_client_nonce = rq.has_auth_proof = 1;
    rq.auth_client_nonce = (ProtobufCBinaryData){sizeof client_nonce, client_nonce};
    rq.auth_proof = (ProtobufCBinaryData){LCT_AUTH_PROOF_BYTES, (uint8_t *)proof};
  }
  Lctpb__Reply *rp;
  uint32_t status = test_raw_call(s, &rq, NULL, 0, &rp);
  lctpb__reply__free_unpacked(rp, NULL);
  return status;
}

/* Each wrong answer costs lctd a proof per tenant: more than a second's budget of them is answered LCT_EBUSY
 * unchecked, its challenge kept; liblct answers that again a second later, so the right token, asked for at
 * once, authenticates when the budget has come back. */
Test(tenants, wrong_answers_have_a_budget, .init = start_many_long_tokens, .fini = stop) {
  const uint8_t guess[LCT_AUTH_PROOF_BYTES] = {0};
  int s = test_raw_open(daemon_.tcp);
  cr_assert_eq(auth_call(s, NULL), 0, "a challenge");
  cr_assert_eq(auth_call(s, guess), (uint32_t)-LCT_EACCES, "the first wrong answer is checked");
  cr_assert_eq(auth_call(s, NULL), 0, "another challenge");
  cr_assert_eq(auth_call(s, guess), (uint32_t)-LCT_EBUSY, "the next, within the second, is not");
  nn_close(s);
  lct_client *alice = client_as(daemon_.tcp, alice_);
  put_ok(alice, "alice/x", "x", 1, NULL);
  lct_close(alice);
}
