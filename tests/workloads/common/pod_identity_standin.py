"""A local stand-in for what a pod meets on EKS with Pod Identity: S3 that checks every request's
credentials, and the Pod Identity agent's credential endpoint handing out short-lived ones.

``python tests/workloads/common/pod_identity_standin.py S3_PORT AGENT_PORT TOKEN_FILE LIFETIME_S BUCKET``

- S3: moto's server with its IAM authentication on (``INITIAL_NO_AUTH_ACTION_COUNT`` 0), so a
  request is accepted only with a known access key, its session token and a valid SigV4
  signature, for a role whose policy allows it.
- Agent: ``GET /v1/credentials`` with ``Authorization: <token file content>`` answers in the
  agent's format (AccessKeyId, SecretAccessKey, Token, AccountId, Expiration); every call
  issues new credentials (an STS session of the role, in moto) that expire LIFETIME_S later.
- Expiry is enforced: once a session's Expiration passes it is removed from moto's STS backend,
  so S3 rejects its access key from then on (moto itself never expires sessions).

Prints ``ready`` when both listen, then ``issued KEY`` / ``revoked KEY`` per event. Loopback only.
"""

from __future__ import annotations

import datetime
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
from moto import settings
from moto.server import ThreadedMotoServer
from moto.sts.models import sts_backends

ACCOUNT = "123456789012"  # moto's default account
ROLE = "hpray-workloads"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # moto keeps naive UTC


def main() -> None:
    s3_port, agent_port, token_file, lifetime, bucket = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        sys.argv[3],
        float(sys.argv[4]),
        sys.argv[5],
    )
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=s3_port, verbose=False)
    server.start()
    # Set-up while authentication is still off: the role, its S3 policy and the bucket.
    setup = {
        "endpoint_url": f"http://127.0.0.1:{s3_port}",
        "region_name": "us-east-1",
        "aws_access_key_id": "setup",
        "aws_secret_access_key": "setup",
    }
    iam = boto3.client("iam", **setup)
    iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument="{}")
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_role_policy(RoleName=ROLE, PolicyName="s3", PolicyDocument=json.dumps(policy))
    boto3.client("s3", **setup).create_bucket(Bucket=bucket)
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # from here on every request is authenticated

    sts = sts_backends[ACCOUNT]["aws"]
    lock = threading.Lock()

    def expire() -> None:
        while True:
            with lock:
                for session in [s for s in sts.assumed_roles if s.expiration <= _now()]:
                    sts.assumed_roles.remove(session)
                    print("revoked", session.access_key_id, flush=True)
            time.sleep(0.05)

    class Agent(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with open(token_file) as f:
                expected = f.read()
            if self.path != "/v1/credentials" or self.headers.get("Authorization") != expected:
                self.send_response(401 if self.path == "/v1/credentials" else 404)
                self.end_headers()
                return
            with lock:
                session = sts.assume_role("us-east-1", "pod", f"arn:aws:iam::{ACCOUNT}:role/{ROLE}", "", 900, "")
                session.expiration = _now() + datetime.timedelta(seconds=lifetime)
            body = json.dumps(
                {
                    "AccessKeyId": session.access_key_id,
                    "SecretAccessKey": session.secret_access_key,
                    "Token": session.session_token,
                    "AccountId": ACCOUNT,
                    "Expiration": session.expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            ).encode()
            print("issued", session.access_key_id, flush=True)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    threading.Thread(target=expire, daemon=True).start()
    agent = ThreadingHTTPServer(("127.0.0.1", agent_port), Agent)
    print("ready", flush=True)
    agent.serve_forever()


if __name__ == "__main__":
    main()
