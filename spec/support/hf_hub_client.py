"""huggingface_hub's view of the shared cache, for spec/hub_spec.rb.

usage: hf_hub_client.py download REPO FILE   fetch FILE (from HF_ENDPOINT) into HF_HUB_CACHE
       hf_hub_client.py cached REPO FILE     where the cache has FILE, without the network
       hf_hub_client.py scan                 the cache as scan_cache_dir() reads it
Prints one JSON object.
"""
import json
import sys

import huggingface_hub
from huggingface_hub import hf_hub_download, scan_cache_dir, try_to_load_from_cache

command, *args = sys.argv[1:]
result = {"version": huggingface_hub.__version__}
if command == "download":
    result["path"] = hf_hub_download(args[0], args[1])
elif command == "cached":
    result["path"] = hf_hub_download(args[0], args[1], local_files_only=True)
    result["try_to_load_from_cache"] = try_to_load_from_cache(args[0], args[1])
elif command == "scan":
    info = scan_cache_dir()
    result["warnings"] = [str(w) for w in info.warnings]
    result["repos"] = [
        {
            "repo_id": repo.repo_id,
            "revisions": [
                {
                    "commit_hash": rev.commit_hash,
                    "refs": sorted(rev.refs),
                    "files": sorted((f.file_name, f.blob_path.name, f.size_on_disk) for f in rev.files),
                }
                for rev in repo.revisions
            ],
        }
        for repo in info.repos
    ]
else:
    sys.exit(f"unknown command {command}")
print(json.dumps(result))
