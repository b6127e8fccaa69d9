//! `herald explain KIND [NS/]NAME --server URL`: one `GET /explain`, printed as a table (or JSON).
//! Exit 0 with an answer; 1 when herald refuses (a missing object, a bad query, no credential).

use herald_server::explain::client::{Ask, fetch};
use herald_server::explain::render::table;

use crate::cli::{ExplainArgs, ExplainOutput};

pub async fn run(args: ExplainArgs) -> anyhow::Result<()> {
    let ask = Ask {
        kind: &args.kind,
        object: &args.object,
        shards: args.shards.as_deref(),
    };
    match fetch(
        &args.server,
        &ask,
        args.token_file.as_deref(),
        args.ca_file.as_deref(),
    )
    .await
    {
        Ok(answer) => {
            match args.output {
                ExplainOutput::Table => print!("{}", table(&answer)),
                ExplainOutput::Json => println!("{answer:#}"),
            }
            Ok(())
        }
        Err(e) => {
            eprintln!("herald explain: {e}");
            std::process::exit(1);
        }
    }
}
